"""On a CUDA GPU: inputs match the CPU draw, every available library baseline computes the
contract, and the scripted templates compile and pass (skipped without CUDA)."""
import json
from pathlib import Path

import pytest
import torch

import operators
from operators._operator import load_module

NAMES = list(operators.REGISTRY)
TEMPLATES = Path(__file__).parents[2] / "ablate" / "models" / "scripted_templates"


def _shapes(op):
    """The smoke shapes and the smallest eval shape (the reference runs in float32)."""
    return op.shapes["smoke"] + [min(op.shapes["eval"], key=op.bytes)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_inputs_on_cuda_equal_the_cpu_draw(name):
    op = operators.get(name)
    shape = op.shapes["smoke"][0]
    for a, b in zip(op.make_inputs(shape, 3, "cuda", "large"), op.make_inputs(shape, 3, "cpu", "large")):
        if isinstance(a, torch.Tensor):
            assert a.is_cuda and torch.equal(a.cpu(), b)


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_library_baselines_compute_the_contract(name):
    op = operators.get(name)
    failures = []
    for bname, b in op.baselines.items():
        if b.unavailable() or "max_autotune" in bname:  # max-autotune: the benchmark times it
            continue
        for shape in _shapes(op):
            for dist in ("normal", "large"):
                inputs = op.make_inputs(shape, 0, "cuda", dist)
                try:
                    ok, _, msg = op.verify(b.fn(*inputs), op.reference(*inputs), inputs, shape["dtype"])
                except Exception as e:
                    ok, msg = False, f"{type(e).__name__}: {e}"[:200]
                if not ok:
                    failures.append(f"{bname} {shape} {dist}: {msg}")
    assert not failures, "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(p.stem for p in TEMPLATES.glob("*.py") if p.stem in operators.REGISTRY))
def test_scripted_template_compiles_and_passes(name):
    path = TEMPLATES / f"{name}.py"
    op = operators.get(name)
    for i, cfg in enumerate(json.loads(path.read_text().splitlines()[0].removeprefix("# scripted-configs:"))):
        mod = load_module(path, f"gpu_template_{name}_{i}")
        mod.CONFIG = cfg
        for shape in _shapes(op):
            inputs = op.make_inputs(shape, 1, "cuda", "offset")
            ok, _, msg = op.verify(mod.kernel(*inputs), op.reference(*inputs), inputs, shape["dtype"])
            assert ok, f"{cfg} {shape}: {msg}"
