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

What counts as a passthrough is what the reference dispatches, not how its source spells it: at
load time Model.forward runs once on the meta device (shapes only, nothing computed) under a
dispatch mode, and every ATen operator it dispatches below autograd (a composite one, F.linear or
F.kl_div, as what it decomposes into) is in `library_ops` (views, allocations and copies aside).
An alias (nn.KLDivLoss for F.kl_div, F.relu for torch.relu), the problem's own modules re-used in
ModelNew (nn.Sequential, nn.Linear) or a mirrored call (torch.mm for matmul) dispatch the same
operators, and every library kernel of a family one of them belongs to (a convolution for a matrix
product, a batch norm for a layer norm: operators/_library_ops.py) counts as the same work.
A problem that cannot run on the meta device keeps only the dotted torch calls of its source
(`library_calls`) and is listed in UNTRACED.

A problem whose output barely depends on its input passes every check with a constant output
(KernelBench 3_DeepNarrowMLP: deep narrow ReLU layers). At load time two independent input draws
are run (when the problem is small enough to run quickly on the CPU): outputs that agree within
the tolerance flag it in INSENSITIVE (name -> why), returned by flags(op) and said on stderr when
the problem is loaded.
"""
from __future__ import annotations

import ast
import re
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ablate.errors import AblateError
from ablate.operators import _meta
from ablate.operators._inputs import generator, tensor
from ablate.operators._entries import module_runner
from ablate.operators._library_ops import base_name, library_family
from ablate.operators._node import node_value
from ablate.operators._operator import Baseline, Operator, load_module

SEED = 42  # KernelBench seeds the RNG with 42 before building Model and ModelNew
# KernelBench's atol = rtol = 1e-2, as the per-element tolerance of the one rule (relative to
# max(|ref|, output RMS)): TF32 and other reduction orders pass, an error of a few percent does not.
TOLERANCE = {"float32": 1e-2, "float16": 1e-2, "bfloat16": 1e-2, "float64": 1e-2}
# Allocation calls in a problem's Model are not the computation; using them is not a passthrough.
_NOT_PASSTHROUGH = {"torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like", "torch.ones",
                    "torch.ones_like", "torch.full", "torch.full_like", "torch.arange", "torch.tensor",
                    "torch.randn", "torch.rand", "torch.randint", "torch.nn.Parameter", "torch.nn.Module"}
# ATen operators that compute nothing (views, shapes, allocations, copies and casts): a kernel's own
# code uses them around its work; their use is never a passthrough.
NEUTRAL_OPS = frozenset("aten::" + n for n in (
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_", "scalar_tensor",
    "lift_fresh", "lift_fresh_copy", "resize_", "to", "_to_copy", "copy_", "clone", "contiguous", "detach", "alias",
    "view", "_unsafe_view", "reshape", "view_as", "reshape_as", "as_strided", "expand", "expand_as", "t", "transpose",
    "permute", "unsqueeze", "squeeze", "flatten", "unflatten", "select", "slice", "narrow", "numpy_T", "item",
    "_local_scalar_dense", "result_type", "size", "stride", "dim", "is_same_size", "unbind", "split", "chunk",
    "split_with_sizes", "movedim", "moveaxis", "type_as", "_reshape_alias", "arange", "resolve_conj", "resolve_neg"))
UNTRACED: dict[str, str] = {}  # problem -> why its reference could not be traced
INSENSITIVE: dict[str, str] = {}  # problem -> why its output counts as insensitive to its input
CHECK_FLOPS = 2e9  # the input-sensitivity check runs when a problem is at most this many FLOPs ...
CHECK_BYTES = 256 << 20  # ... and this many bytes of inputs, parameters and outputs


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


def dispatched_ops(build) -> tuple[str, ...]:
    """The ATen operators a computation dispatches below autograd: build() -> (fn, inputs), run
    once on the meta device under a dispatch mode. A composite operator (F.linear, F.kl_div,
    torch.matmul) shows as what it decomposes into (addmm, the sum and logs of kl_div, mm): what
    computes, on every device. What a device's kernel calls inside is not seen. Views,
    allocations and copies are left out (NEUTRAL_OPS). Raises when the computation cannot run on
    the meta device."""
    from torch.utils._python_dispatch import TorchDispatchMode

    found: set[str] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            found.add(func._schema.name)
            return func(*args, **(kwargs or {}))

    with torch.random.fork_rng(), torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn, inputs = build()
        with torch.no_grad(), Record():
            fn(*inputs)
    return tuple(sorted({b for n in found
                         if n.startswith("aten::") and n not in NEUTRAL_OPS and (b := base_name(n)) not in NEUTRAL_OPS}))


def _insensitive(op: Operator, make_inputs, reference, shape) -> str | None:
    """Why the problem's output barely depends on its input: the reference's output on one draw of
    the problem's own inputs passes the operator's check (the one rule) against another draw, so
    a constant output passes there. None when it does not. The message names the distributions
    where the constant also passes, and those where it fails (where the judge still catches it)."""
    from ablate.operators._operator import DISTRIBUTIONS

    with torch.random.fork_rng(), torch.no_grad():
        constant = reference(*make_inputs(shape, 1, "cpu", "normal"))
        passes = {d: op.verify(constant, make_inputs(shape, 2, "cpu", d)).ok for d in DISTRIBUTIONS}
    if not passes["normal"]:
        return None
    failing = [d for d, ok in passes.items() if not ok]
    return ("its output barely depends on its input: the reference's output on one draw of its inputs passes the "
            "check on another draw, so a constant output passes " +
            ("on every input distribution" if not failing else f"except on the {', '.join(failing)} distribution(s)"))


def flags(op: Operator) -> tuple[str, ...]:
    """What is known to weaken the judgement of a KernelBench problem: "output_insensitive" (a
    constant output passes), "untraced" (passthrough judged from its source's spelling only)."""
    return tuple(f for f, table in (("output_insensitive", INSENSITIVE), ("untraced", UNTRACED)) if op.name in table)


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
    name = f"kernelbench/{stem}"
    try:
        library_ops = library_family(*dispatched_ops(lambda: (mod.Model(*mod.get_init_inputs()), tuple(mod.get_inputs()))))
        UNTRACED.pop(name, None)
    except Exception as e:  # noqa: BLE001 - data-dependent shapes, .item(), an op without a meta kernel
        library_ops = ()
        UNTRACED[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    eager = Baseline("torch_eager", reference)
    op = Operator(
        name=name,
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
        library_ops=library_ops,
        task_files={"reference.py": file},
        why_shapes=f"The sizes KernelBench level {level} fixes for this problem.",
        entry={"kind": "kernelbench", "problem": str(file.resolve()), "seed": SEED},
        source={"source": "kernelbench", "path": str(root or file.parent), "level": level, "names": [stem]},
    )
    bytes_, flops_ = roofline()
    INSENSITIVE.pop(name, None)
    if flops_ <= CHECK_FLOPS and 0 < bytes_ <= CHECK_BYTES:
        try:
            why = _insensitive(op, make_inputs, reference, shape)
        except Exception:  # noqa: BLE001 - a reference that cannot run: the judge reports it
            why = None
        if why:
            INSENSITIVE[name] = why
            print(f"ablate: warning: {name}: {why}", file=sys.stderr)
    return op


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
