"""On a CUDA GPU: the device draw is deterministic and has the distributions of the CPU draw,
every available library baseline passes the correctness rule calibrated against the others (or is
excluded by the contract rule named for it), a 1%-biased RMSNorm fails, and the scripted
templates compile and pass (skipped without CUDA).
"""
import json
from pathlib import Path

import pytest
import torch

import operators
from operators._correctness import calibrate
from operators._operator import load_module, shape_id

NAMES = list(operators.REGISTRY)
TEMPLATES = Path(__file__).parents[2] / "ablate" / "models" / "scripted_templates"


def _shapes(op):
    """The smoke shapes and the smallest eval shape (the reference runs in float64)."""
    return op.shapes["smoke"] + [min(op.shapes["eval"], key=op.bytes)]


# Library baselines that break a named contract rule of their operator (torch 2.11, liger 0.8.5):
# calibration excludes them by that rule on every input, and says so.
OUTSIDE_CONTRACT = {
    ("cross_entropy", "liger"): "float32_row_losses",  # per-row losses stored in bfloat16
    ("rope", "liger"): "float32_rotation",  # the rotation computed in bfloat16
}


def _libraries(op, compiled=False):
    """Available baselines; torch.compile ones only when asked (minutes of compiling per shape)."""
    return {n: b.fn for n, b in op.baselines.items()
            if not b.unavailable() and (compiled or "compile" not in n)}


def _calibrated(op, shape, dist, seed=0, compiled=False):
    inputs = op.make_inputs(shape, seed, "cuda", dist)
    return inputs, calibrate(op, inputs, implementations=_libraries(op, compiled), dtype=shape["dtype"])


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_device_draw_is_deterministic_and_distributed_as_on_the_cpu(name):
    """Inputs are drawn where they are used (a device generator seeded from the CPU one), so the
    judge and the candidate agree on a GPU; the values differ from the CPU draw, the distribution not."""
    op = operators.get(name)
    shape = max(op.shapes["smoke"], key=op.bytes)
    for dist in ("normal", "offset", "large"):
        a, again, other = (op.make_inputs(shape, s, "cuda", dist) for s in (3, 3, 4))
        cpu = op.make_inputs(shape, 3, "cpu", dist)
        changed = False
        for x, y, z, c in zip(a, again, other, cpu):
            if not isinstance(x, torch.Tensor):
                continue
            assert x.is_cuda and torch.equal(x, y), "same seed, same device: the same values"
            assert x.dtype == c.dtype and x.shape == c.shape
            changed = changed or not torch.equal(x, z)  # tables (rope's cos and sin) do not depend on it
            if x.is_floating_point() and x.numel() >= 256:
                xf, cf = x.double().cpu(), c.double()
                assert abs(xf.mean() - cf.mean()) < 0.2 * cf.std() + 0.05, dist
                assert 0.8 < xf.std() / cf.std() < 1.25, dist
        assert changed, "another seed, other values"


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_every_library_baseline_passes_on_the_public_shapes(name):
    """On every public shape and input distribution each library either lies within the
    envelope of the reference and the other libraries, or is excluded by the contract rule
    OUTSIDE_CONTRACT names for it; nothing raises."""
    op = operators.get(name)
    problems = []
    for shape in op.shapes["public"] + op.shapes["smoke"]:
        for dist in operators.DISTRIBUTIONS:
            _, cal = _calibrated(op, shape, dist)
            for lib, v in cal.verdicts.items():
                rule = OUTSIDE_CONTRACT.get((name, lib))
                if (v.status, v.rule) != (("excluded", rule) if rule else ("pass", None)):
                    problems.append(f"{lib} {shape_id(shape)} {dist}: {v.status} {v.rule or ''} {v.message}")
    assert not problems, "\n".join(problems)


@pytest.mark.gpu
def test_a_one_percent_biased_rmsnorm_fails_against_the_libraries():
    op = operators.get("rmsnorm")
    for shape in op.shapes["public"] + op.shapes["smoke"]:
        for dist in operators.DISTRIBUTIONS:
            inputs, cal = _calibrated(op, shape, dist)
            assert len(cal.envelope.members) > 2, cal.envelope  # the libraries took part
            biased = (op.reference(*inputs).float() * 1.01).to(inputs[0].dtype)
            j = op.verify(biased, inputs, envelope=cal.envelope)
            assert not j.ok and j.margin > 1.5, (shape, dist, j)
            assert op.verify(op.reference(*inputs), inputs, envelope=cal.envelope).ok


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(p.stem for p in TEMPLATES.glob("*.py") if p.stem in operators.REGISTRY))
def test_scripted_template_compiles_and_passes(name):
    path = TEMPLATES / f"{name}.py"
    op = operators.get(name)
    for shape in _shapes(op):
        envelopes = {dist: _calibrated(op, shape, dist, seed=1) for dist in ("normal", "large", "tiny_rows")}
        for i, cfg in enumerate(json.loads(path.read_text().splitlines()[0].removeprefix("# scripted-configs:"))):
            mod = load_module(path, f"gpu_template_{name}_{i}")
            mod.CONFIG = cfg
            for dist, (inputs, cal) in envelopes.items():
                j = op.verify(mod.kernel(*inputs), inputs, envelope=cal.envelope)
                assert j.ok, f"{cfg} {shape} {dist}: {j.message}"
