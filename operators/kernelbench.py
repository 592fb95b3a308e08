"""KernelBench problems as operators.

A problem file (``KernelBench/level1/1_Square_matrix_multiplication_.py``) defines ``Model``
(an nn.Module), ``get_inputs()`` and ``get_init_inputs()``. It becomes the operator
``kernelbench/<file stem>`` whose reference builds ``Model(*get_init_inputs())`` under a fixed
seed and calls it. A submission defines either ``kernel(*inputs)`` or, as KernelBench expects,
``class ModelNew`` with Model's constructor; ``Operator.kernel_of(module)`` turns either into
``kernel(*inputs)``, building ModelNew under the same seed so its parameters equal Model's.

Each problem has one size (the file's). Inputs: the 'normal' distribution is the problem's own
get_inputs(); the other distributions redraw its float tensors (same shape and dtype), folded to
non-negative values where the problem's own inputs are non-negative (log, sqrt), so the check
also runs on inputs the file did not anticipate; tiny_rows keeps its smallest rows tiny, not zero
(a zero row makes an argmax tie or a matrix singular).
"""
from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ablate.errors import AblateError
from operators import _meta
from operators._inputs import generator, tensor
from operators._entries import module_runner
from operators._node import node_value
from operators._operator import Baseline, Operator, load_module

SEED = 42  # KernelBench seeds the RNG with 42 before building Model and ModelNew
# KernelBench's atol = rtol = 1e-2, as the per-element tolerance of the one rule (relative to
# max(|ref|, output RMS)): TF32 and other reduction orders pass, an error of a few percent does not.
TOLERANCE = {"float32": 1e-2, "float16": 1e-2, "bfloat16": 1e-2, "float64": 1e-2}
# Allocation calls in a problem's Model are not the computation; using them is not a passthrough.
_NOT_PASSTHROUGH = {"torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like", "torch.ones",
                    "torch.ones_like", "torch.full", "torch.full_like", "torch.arange", "torch.tensor",
                    "torch.randn", "torch.rand", "torch.randint", "torch.nn.Parameter", "torch.nn.Module"}


def problem_dir(path: str | Path, level: int) -> Path:
    """The folder of a level's problem files, given the KernelBench checkout (or the folder itself)."""
    root = Path(str(path)).expanduser()
    cands = [root / "KernelBench" / f"level{level}", root / f"level{level}"]
    for cand in cands + ([root] if root.name == f"level{level}" else []):
        if cand.is_dir() and any(cand.glob("*.py")):
            return cand
    raise AblateError(f"no KernelBench level {level} under {root} (expected {root}/KernelBench/level{level}/*.py)")


def _runner(cls, mod, compile_mode: str | None = None) -> Any:
    """kernel(*inputs) calling cls(*get_init_inputs()) built under SEED (see _entries)."""
    return module_runner(cls, mod, SEED, compile_mode)


def _library_calls(source: str) -> tuple[str, ...]:
    """Dotted torch calls in Model.forward: calling them in a submission is a passthrough. Layers
    built in __init__ (nn.Linear) are not: a ModelNew keeps them to hold the same parameters."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            forward = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward"]
            for call in (c for f in forward for c in ast.walk(f)):
                if isinstance(call, ast.Call):
                    parts, f = [], call.func
                    while isinstance(f, ast.Attribute):
                        parts.append(f.attr)
                        f = f.value
                    if isinstance(f, ast.Name):
                        name = ".".join([f.id, *reversed(parts)])
                        name = re.sub(r"^F\.", "torch.nn.functional.", re.sub(r"^nn\.", "torch.nn.", name))
                        if name.startswith("torch.") and name not in _NOT_PASSTHROUGH:
                            found.add(name)
    short = {re.sub(r"^torch\.nn\.functional\.", "F.", n) for n in found} | {
        re.sub(r"^torch\.nn\.", "nn.", n) for n in found}
    return tuple(sorted(found | short))


def from_file(file: Path, level: int, root: Path | None = None) -> Operator:
    file = Path(file)
    stem = file.stem
    mod = load_module(file, f"kernelbench_level{level}_{re.sub(r'[^0-9A-Za-z_]', '_', stem)}")
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, attr):
            raise AblateError(f"KernelBench problem {file} defines no {attr}")

    reference = _runner(mod.Model, mod)

    def make_inputs(shape, seed, device, dist):
        # get_inputs() draws on the judge's device (its factory calls follow torch.device): drawing
        # a 6 GiB tensor on the CPU took about 25 s a set on an H200 host (19_ReLU)
        dev = torch.device(device)
        on_gpu = dev.type == "cuda"
        with torch.random.fork_rng(devices=[dev.index or 0] if on_gpu else [], device_type="cuda"), dev:
            torch.manual_seed(seed)
            raw = list(mod.get_inputs())
        g = generator(seed, device)
        out = []
        for t in raw:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and dist != "normal":
                new = tensor(tuple(t.shape), dist, g, t.dtype, device, zero_rows=False)  # argmax ties, singular
                t = new.abs() if bool((t >= 0).all()) else new
            out.append(t.to(device) if isinstance(t, torch.Tensor) else t)
        return tuple(out)

    cost: dict[str, tuple[int, int]] = {}

    def roofline() -> tuple[int, int]:
        if "v" not in cost:
            def build():
                model = mod.Model(*mod.get_init_inputs())
                params = _meta.nbytes(list(model.parameters())) + _meta.nbytes(list(model.buffers()))
                return model, tuple(_meta.to_meta(list(mod.get_inputs()))), params
            cost["v"] = _meta.trace(build) or (0, 0)
        return cost["v"]

    # dtype of the first floating input, read from a meta-device get_inputs() (no allocation).
    try:
        with torch.device("meta"):
            metas = list(mod.get_inputs())
        dtype = next((str(t.dtype).removeprefix("torch.") for t in metas
                      if isinstance(t, torch.Tensor) and t.is_floating_point()), "float32")
    except Exception:
        dtype = "float32"
    shape = {"problem": stem, "dtype": dtype}
    eager = Baseline("torch_eager", reference)
    return Operator(
        name=f"kernelbench/{stem}",
        goal=(
            f"KernelBench level {level} problem {stem}: write kernel.py computing exactly what "
            "reference.py's Model computes, on the inputs its get_inputs() builds, faster than "
            "PyTorch. Define either kernel(*inputs), taking get_inputs()'s values in order and "
            "returning Model(*get_init_inputs())(*inputs), or class ModelNew with Model's "
            f"constructor arguments (it is built after torch.manual_seed({SEED}), as Model is, so "
            "parameters created the same way match) whose forward returns the same outputs."
        ),
        reference=reference,
        make_inputs=make_inputs,
        shapes={"smoke": [shape], "public": [shape], "eval": [shape]},
        tolerance=TOLERANCE,
        bytes=lambda s: roofline()[0],
        flops=lambda s: roofline()[1],
        baselines={
            "torch_eager": eager,
            "torch_compile": Baseline("torch_compile", _runner(mod.Model, mod, "default"), needs_cuda=True),
            "torch_compile_max_autotune": Baseline(
                "torch_compile_max_autotune", _runner(mod.Model, mod, "max-autotune"), needs_cuda=True),
        },
        library_calls=_library_calls(file.read_text()),
        task_files={"reference.py": file},
        why_shapes=f"The sizes KernelBench level {level} fixes for this problem.",
        entry={"kind": "kernelbench", "problem": str(file.resolve()), "seed": SEED},
        source={"source": "kernelbench", "path": str(root or file.parent), "level": level, "names": [stem]},
    )


def _numbered(files: list[Path]) -> list[Path]:
    def key(p: Path):
        m = re.match(r"(\d+)_", p.name)
        return (int(m.group(1)) if m else 1 << 30, p.name)

    return sorted(files, key=key)


def load(path: str | Path, level: int = 1, problems: list[str] | None = None) -> list[Operator]:
    """The level's problems (all, or those named by stem, 'kernelbench/<stem>' or number)."""
    folder = problem_dir(path, level)
    files = _numbered([f for f in folder.glob("*.py") if not f.name.startswith("_")])
    if problems:
        wanted = {str(p).removeprefix("kernelbench/") for p in problems}
        chosen = [f for f in files if f.stem in wanted or f.name.split("_", 1)[0] in wanted]
        found = {f.stem for f in chosen} | {f.name.split("_", 1)[0] for f in chosen}
        unknown = sorted(wanted - found)
        if unknown:
            raise AblateError(f"no KernelBench level {level} problem {', '.join(unknown)}; "
                              f"valid: {', '.join(f.stem for f in files[:20])}{' ...' if len(files) > 20 else ''}")
        files = chosen
    return [from_file(f, level, Path(str(path))) for f in files]


def load_node(node: Mapping[str, Any]) -> list[Operator]:
    """load_set's loader for `source: kernelbench` (keys: path, level, names)."""
    path = node_value(node, "kernelbench", "path")
    if not path:
        raise AblateError("kernelbench.path is not set: pass kernelbench.path=/path/to/KernelBench")
    level = int(node_value(node, "kernelbench", "level", 1))
    return load(path, level, list(node_value(node, "kernelbench", "names") or []))
