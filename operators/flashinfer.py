"""FlashInfer Trace definitions as operators, and accepted kernels exported as Solutions.

A Definition JSON (name, op_type, axes const/var, inputs/outputs with shapes as axis names and
dtypes, `reference` as PyTorch source defining run(...), constraints) plus its workloads (JSONL;
each line a Workload {uuid, axes: {var axis: value}, inputs: {name: {type: random | scalar |
safetensors, ...}}}, bare or wrapped as a Trace {"definition", "workload", ...}) becomes the
operator `flashinfer/<name>`, one shape per workload. Dataset layout: <root>/definitions/**/<name>.json
and <root>/workloads/**/<name>.jsonl.

The submission is kernel(*inputs) with the definition's inputs in order and its outputs returned
(a tuple when several), i.e. FlashInfer's value-returning style; export_solution wraps it as
run(<input names>) with destination_passing_style false.
"""
from __future__ import annotations

import ast
import hashlib
import json
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ablate.errors import AblateError
from ablate.operators import _meta
from ablate.operators._baselines import compile_baselines
from ablate.operators._inputs import generator, integers, tensor
from ablate.operators._node import node_value
from ablate.operators._operator import Baseline, Operator

DTYPES = {
    "float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float8_e4m3fn": torch.float8_e4m3fn, "float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}
# FlashInfer-Bench's default atol = rtol = 1e-2 for floating outputs, as the per-element tolerance
# of the one rule (relative to max(|ref|, output RMS)); integer outputs are compared exactly.
TOLERANCE = {k: (1e-2 if v.is_floating_point else 0.0) for k, v in DTYPES.items()}
INT_RANGE = (0, 16)  # random integer inputs: small and non-negative, so index-like inputs stay valid

_definitions: dict[str, dict] = {}  # name -> Definition JSON, for export_solution


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise AblateError(f"FlashInfer dtype {name!r} is not supported here; supported: {', '.join(DTYPES)}")
    return DTYPES[name]


def _dims(spec: Mapping, defn: Mapping, axes: Mapping[str, int]) -> list[int] | None:
    """Concrete dims of a tensor spec; None for a scalar (shape null)."""
    if spec.get("shape") is None:
        return None
    dims = []
    for a in spec["shape"]:
        ax = defn["axes"].get(a)
        if ax is None:
            raise AblateError(f"definition {defn['name']}: shape uses undefined axis {a!r}")
        if ax.get("type") == "const":
            dims.append(int(ax["value"]))
        elif a in axes:
            dims.append(int(axes[a]))
        else:
            raise AblateError(f"definition {defn['name']}: workload gives no value for var axis {a!r}")
    return dims


def _run_fn(source: str, name: str):
    """The definition's reference as a callable: exec the source, take run()."""
    namespace: dict[str, Any] = {"__name__": f"flashinfer_reference_{name}"}
    exec(compile(source, f"<flashinfer reference {name}>", "exec"), namespace)
    if not callable(namespace.get("run")):
        raise AblateError(f"definition {name}: reference defines no run(...)")
    return namespace["run"]


def _as_outputs(result: Any, output_names: list[str]) -> Any:
    """run()'s result in the contract's form: one output as itself, several as a tuple in order."""
    if isinstance(result, Mapping):
        result = tuple(result[n] for n in output_names)
    if isinstance(result, list):
        result = tuple(result)
    if isinstance(result, tuple) and len(result) == 1:
        return result[0]
    return result


def _read_workloads(path: Path) -> list[dict]:
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise AblateError(f"{path}:{i + 1}: not JSON ({e.msg})") from None
        out.append(obj["workload"] if isinstance(obj.get("workload"), dict) else obj)  # Trace-wrapped or bare
    return out


def from_definition(defn: dict, workloads: list[dict], root: Path, def_path: Path | None = None) -> Operator:
    for key in ("name", "axes", "inputs", "outputs", "reference"):
        if key not in defn:
            raise AblateError(f"FlashInfer definition {def_path or defn.get('name', '?')} has no {key!r}")
    name = defn["name"]
    if not workloads:
        raise AblateError(f"FlashInfer definition {name} has no workloads (expected workloads/**/{name}.jsonl)")
    _definitions[name] = defn
    in_names, out_names = list(defn["inputs"]), list(defn["outputs"])
    run = _run_fn(defn["reference"], name)
    by_uuid = {w["uuid"]: w for w in workloads}
    tensors: dict[tuple[str, str], torch.Tensor] = {}  # safetensors file contents, loaded once

    def reference(*inputs):
        with torch.no_grad():
            return _as_outputs(run(*inputs), out_names)

    def _safetensors(desc: Mapping) -> torch.Tensor:
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise AblateError("this workload stores inputs in safetensors: pip install safetensors") from None
        p = Path(desc["path"])
        p = p if p.is_absolute() else next((c for c in (root / p, Path.cwd() / p) if c.is_file()), root / p)
        if not p.is_file():
            raise AblateError(f"definition {name}: safetensors file {desc['path']} not found under {root}")
        key = (str(p), desc["tensor_key"])
        if key not in tensors:
            tensors[key] = load_file(str(p))[desc["tensor_key"]]
        return tensors[key]

    def make_inputs(shape, seed, device, dist):
        wl = by_uuid.get(shape["workload"])
        if wl is None:
            raise AblateError(f"definition {name} has no workload {shape['workload']}")
        g = generator(seed, device)
        out = []
        for n in in_names:
            spec, desc = defn["inputs"][n], wl.get("inputs", {}).get(n, {"type": "random"})
            dims, dtype = _dims(spec, defn, wl.get("axes", {})), _dtype(spec["dtype"])
            kind = desc.get("type")
            if kind == "scalar":
                out.append(desc["value"])
            elif kind == "safetensors":
                out.append(_safetensors(desc).to(device, copy=True))  # the cache stays intact
            elif kind == "random" and dims is None:
                raise AblateError(f"definition {name}: scalar input {n} needs a 'scalar' workload value")
            elif kind == "random" and dtype.is_floating_point:
                out.append(tensor(tuple(dims), dist, g, dtype, device, zero_rows=False))  # ties, singular
            elif kind == "random" and dtype == torch.bool:
                out.append(integers(tuple(dims), 0, 2, g, device).bool())
            elif kind == "random":
                out.append(integers(tuple(dims), *INT_RANGE, g, device, dtype))
            else:
                raise AblateError(f"definition {name}: input {n} has unknown source type {kind!r}")
        return tuple(out)

    def _esize(dtype_name: str) -> int:
        return torch.empty(0, dtype=_dtype(dtype_name)).element_size()

    def _bytes(shape):
        axes = by_uuid[shape["workload"]].get("axes", {})
        total = 0
        for spec in list(defn["inputs"].values()) + list(defn["outputs"].values()):
            dims = _dims(spec, defn, axes)
            total += _esize(spec["dtype"]) * (math.prod(dims) if dims is not None else 1)
        return total

    def make_inputs_meta(uuid):  # shapes only, for counting FLOPs
        wl = by_uuid[uuid]
        out = []
        for n in in_names:
            spec, desc = defn["inputs"][n], wl.get("inputs", {}).get(n, {"type": "random"})
            dims = _dims(spec, defn, wl.get("axes", {}))
            if desc.get("type") == "scalar":
                out.append(desc["value"])
            else:
                out.append(torch.empty(dims or [], dtype=_dtype(spec["dtype"]), device="meta"))
        return out

    flops_cache: dict[str, int] = {}

    def _flops(shape):
        uuid = shape["workload"]
        if uuid not in flops_cache:
            def build():
                return run, tuple(make_inputs_meta(uuid)), 0
            traced = _meta.trace(build)
            flops_cache[uuid] = traced[1] if traced else 0
        return flops_cache[uuid]

    def _shape(w: dict) -> dict:
        first = next((s["dtype"] for s in list(defn["outputs"].values()) + list(defn["inputs"].values())
                      if s["dtype"] in DTYPES and DTYPES[s["dtype"]].is_floating_point), "float32")
        return {**w.get("axes", {}), "workload": w["uuid"], "dtype": first}

    shapes = [_shape(w) for w in workloads]
    # smoke: the smallest workload, preferring ones that need no safetensors files
    stored = {w["uuid"] for w in workloads if any(d.get("type") == "safetensors" for d in w.get("inputs", {}).values())}
    smallest = min(shapes, key=lambda s: (s["workload"] in stored, _bytes(s)))
    ref_file = _task_file(defn)
    files = {"reference.py": ref_file}
    if def_path is not None:
        files["definition.json"] = def_path
    return Operator(
        name=f"flashinfer/{name}",
        goal=_goal(defn),
        reference=reference,
        make_inputs=make_inputs,
        shapes={"smoke": [smallest], "public": shapes[:1], "eval": shapes},
        tolerance=TOLERANCE,
        bytes=_bytes,
        flops=_flops,
        baselines={"torch_eager": Baseline("torch_eager", reference), **compile_baselines(reference)},
        library_calls=("flashinfer",),
        task_files=files,
        why_shapes=f"The {len(workloads)} workload(s) FlashInfer Trace records for {name}.",
        source={"source": "flashinfer", "path": str(root), "names": [name]},
    )


def _goal(defn: dict) -> str:
    def fmt(n, s):
        shape = "scalar" if s.get("shape") is None else "[" + ", ".join(s["shape"]) + "]"
        return f"{n} {shape} {s['dtype']}"

    axes = ", ".join(f"{a}={v['value']}" if v.get("type") == "const" else f"{a} (varies per workload)"
                     for a, v in defn["axes"].items())
    outs = list(defn["outputs"].items())
    returned = fmt(*outs[0]) if len(outs) == 1 else "the tuple (" + "; ".join(fmt(n, s) for n, s in outs) + ")"
    text = (f"FlashInfer Trace definition {defn['name']} ({defn.get('op_type', defn.get('type', '?'))}): "
            f"{defn.get('description', '').strip()} Write kernel.py defining "
            f"kernel({', '.join(defn['inputs'])}) with inputs "
            f"{'; '.join(fmt(n, s) for n, s in defn['inputs'].items())}, returning {returned}. "
            f"Axes: {axes}.")
    if defn.get("constraints"):
        text += f" Constraints: {'; '.join(defn['constraints'])}."
    return text + " reference.py (the definition's run) is the exact specification."


def _task_file(defn: dict) -> Path:
    """The reference source as a file the workspace can copy (content-addressed, so stable)."""
    src = defn["reference"]
    folder = Path(tempfile.gettempdir()) / "ablate-flashinfer" / hashlib.sha256(src.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "reference.py"
    if not path.exists() or path.read_text() != src:
        path.write_text(src)
    return path


def load(path: str | Path, definitions: list[str] | None = None) -> list[Operator]:
    """Definitions under a FlashInfer Trace dataset root (or one definition JSON file), each with
    its workloads; all of them, or those named (with or without the 'flashinfer/' prefix)."""
    p = Path(str(path)).expanduser()
    if p.is_file():
        # definitions/<op_type>/<name>.json: the dataset root is above definitions/
        root = next((a.parent for a in p.parents if a.name == "definitions"), p.parent)
        def_files = [p]
    elif p.is_dir():
        root = p
        def_files = sorted((p / "definitions").rglob("*.json")) if (p / "definitions").is_dir() else sorted(p.glob("*.json"))
    else:
        raise AblateError(f"no FlashInfer Trace dataset at {p}")
    defs = {}
    for f in def_files:
        try:
            d = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise AblateError(f"{f}: not JSON ({e.msg})") from None
        defs[d.get("name", f.stem)] = (d, f)
    if definitions:
        wanted = [str(n).removeprefix("flashinfer/") for n in definitions]
        unknown = [n for n in wanted if n not in defs]
        if unknown:
            raise AblateError(f"no FlashInfer definition {', '.join(unknown)} under {p}; valid: {', '.join(sorted(defs))}")
        defs = {n: defs[n] for n in wanted}
    if not defs:
        raise AblateError(f"no FlashInfer definitions (*.json) under {p}")
    # Workloads live under workloads/ (traces/ holds results that repeat them); else anywhere.
    wl_root = root / "workloads" if (root / "workloads").is_dir() else root
    ops = []
    for n, (d, f) in defs.items():
        unique = {w["uuid"]: w for wf in sorted(wl_root.rglob(f"{n}.jsonl")) for w in _read_workloads(wf)}
        ops.append(from_definition(d, list(unique.values()), root, f))
    return ops


def load_node(node: Mapping[str, Any]) -> list[Operator]:
    """load_set's loader for `source: flashinfer` (keys: path, names)."""
    path = node_value(node, "flashinfer", "path")
    if not path:
        raise AblateError("flashinfer.path is not set: pass flashinfer.path=/path/to/flashinfer-trace")
    return load(path, list(node_value(node, "flashinfer", "names") or []))


def export_solution(definition: str | Path | Mapping, kernel_path: str | Path, out_path: str | Path, *,
                    name: str | None = None, author: str = "ablate", target_hardware: tuple[str, ...] = ("NVIDIA_H200",),
                    language: str | None = None, description: str | None = None) -> dict:
    """Write an accepted kernel.py as a FlashInfer Trace Solution JSON; returns the Solution.

    definition: a Definition JSON path or dict, or the name of a loaded one ('flashinfer/<name>').
    The single source main.py holds the kernel followed by run(<input names>), the entry point,
    which returns kernel(...)'s outputs (destination_passing_style false).
    """
    if isinstance(definition, Mapping):
        defn = dict(definition)
    elif str(definition).removeprefix("flashinfer/") in _definitions:
        defn = _definitions[str(definition).removeprefix("flashinfer/")]
    elif Path(str(definition)).is_file():
        defn = json.loads(Path(str(definition)).read_text())
    else:
        raise AblateError(f"FlashInfer definition {definition} is neither a loaded definition nor a file")
    src = Path(kernel_path).read_text()
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        raise AblateError(f"{kernel_path}: not valid Python ({e.msg}, line {e.lineno})") from None
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    if "kernel" not in top:
        raise AblateError(f"{kernel_path} defines no kernel(*inputs)")
    imports = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
               for a in (n.names if isinstance(n, ast.Import) else [ast.alias(n.module or "")])}
    language = language or ("triton" if "triton" in imports else "python")
    entry = "run" if "run" not in top else "ablate_run"  # never shadow the kernel's own run()
    args = ", ".join(defn["inputs"])
    main = f"{src.rstrip()}\n\n\ndef {entry}({args}):\n    return kernel({args})\n"
    solution = {
        "name": name or f"{defn['name']}_ablate",
        "definition": defn["name"],
        "description": description or "Kernel written by an agent under the ablate benchmark.",
        "author": author,
        "spec": {
            "language": language,
            "target_hardware": list(target_hardware),
            "entry_point": f"main.py::{entry}",
            "destination_passing_style": False,
            "dependencies": sorted({"torch"} | ({"triton"} if "triton" in imports else set())),
        },
        "sources": [{"path": "main.py", "content": main}],
    }
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(solution, indent=2) + "\n")
    return solution
