"""Compiles the scripted templates for an NVIDIA H100/H200 (sm_90) without a GPU and reports each
kernel's resources: what a launch on the GPU would fail or crawl on (a Triton error, shared memory
past the 227 KB a block may have, more registers than a multiprocessor holds, register spills).

The template's `kernel()` runs on meta tensors of the operator's real shapes (nothing is drawn,
nothing is computed); each Triton launch it makes is recorded instead of run, then compiled by
Triton's own binder, specialisation and compiler for the target, and its cubin's resource usage
read with the cuobjdump that Triton ships. No GPU, no CUDA driver.

    python tests/operators/template_aot.py [--configs all|default] [--shapes eval] OP [OP ...]

prints one JSON object: {op: [{config, shape, kernel, constexprs, num_warps, num_stages, shared,
registers, spill_bytes, tensor_cores (wgmma | mma.sync | null), tma (bool), problem}]}. Run as a subprocess (the launch patch is process-wide).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, compile as triton_compile, make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

from ablate import operators  # noqa: E402
from ablate.operators._operator import load_module, shape_id  # noqa: E402

TEMPLATES = ROOT / "harnesses" / "scripted" / "templates"
TARGET = GPUTarget("cuda", 90, 32)  # H100 / H200
SMEM_PER_BLOCK = 232448  # bytes: the most shared memory one block may have on sm_90 (227 KB)
REGS_PER_SM = 65536
SMS = 132  # H200 multiprocessors (the templates ask the device; meta tensors have none)
L2_BYTES = 60 << 20  # H200 L2, as torch reports it
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"

_launches: list[tuple[JITFunction, tuple, dict]] = []


def _record(self, *args, grid, warmup, **kwargs):
    _launches.append((self, args, kwargs))


def configs(path: Path) -> list[dict]:
    return json.loads(path.read_text().splitlines()[0].removeprefix("# scripted-configs:"))


def meta_inputs(op, shape):
    """The operator's inputs for `shape` as meta tensors (integer inputs, e.g. group ends, drawn as
    usual: they are small and steer the launch)."""
    module = sys.modules[op.make_inputs.__module__]
    real = getattr(module, "tensor", None)
    if real is not None:
        module.tensor = lambda size, dist, g, dtype, device, *a, **k: torch.empty(size, dtype=dtype, device="meta")
    try:
        inputs = op.make_inputs(shape, 0, "cpu", "normal")
    finally:
        if real is not None:
            module.tensor = real
    return tuple(t.to("meta") if isinstance(t, torch.Tensor) and t.dtype.is_floating_point else t for t in inputs)


def _resources(cubin: bytes) -> tuple[int, int]:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(CUOBJDUMP), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    regs = int(m.group(1)) if (m := re.search(r"REG:(\d+)", out)) else -1
    local = sum(int(x) for x in re.findall(r"(?:STACK|LOCAL):(\d+)", out))
    return regs, local


_compiled: dict[str, dict] = {}


def compile_launch(fn: JITFunction, args: tuple, kwargs: dict) -> dict:
    """Compile one recorded launch for TARGET; its resources and what is wrong with them."""
    backend = make_backend(TARGET)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    try:  # the launch's options are checked here (num_warps a power of two): what a GPU launch refuses too
        bound, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    except Exception as e:  # noqa: BLE001 - a refused launch is the finding
        return {"kernel": fn.__name__, "constexprs": {}, "num_warps": kwargs.get("num_warps"),
                "num_stages": kwargs.get("num_stages"), "shared": None, "registers": None, "spill_bytes": None,
                "problem": f"launch refused: {type(e).__name__}: {str(e).strip()[:300]}"}
    consts = {fn.arg_names[p[0]]: v for p, v in constexprs.items()}
    row = {"kernel": fn.__name__, "constexprs": consts, "num_warps": options.num_warps,
           "num_stages": options.num_stages}
    key = json.dumps([fn.__name__, signature, {str(k): str(v) for k, v in constexprs.items()}, str(attrs),
                      options.num_warps, options.num_stages], sort_keys=True, default=str)
    if key in _compiled:
        return dict(row, **_compiled[key])
    try:
        k = triton_compile(ASTSource(fn, signature, constexprs, attrs), target=TARGET, options=options.__dict__)
        regs, spill = _resources(k.asm["cubin"])
        ptx = k.asm["ptx"]
        found = {"shared": k.metadata.shared, "registers": regs, "spill_bytes": spill, "problem": None,
                 "tensor_cores": "wgmma" if "wgmma.mma_async" in ptx else "mma.sync" if "mma.sync" in ptx else None,
                 "tma": "cp.async.bulk.tensor" in ptx}
        threads = 32 * options.num_warps
        if k.metadata.shared > SMEM_PER_BLOCK:
            found["problem"] = f"shared memory {k.metadata.shared} B > {SMEM_PER_BLOCK} B a block may have"
        elif regs * threads > REGS_PER_SM:
            found["problem"] = f"{regs} registers x {threads} threads > {REGS_PER_SM} a multiprocessor holds"
    except Exception as e:  # noqa: BLE001 - a compile error is the finding
        found = {"shared": None, "registers": None, "spill_bytes": None,
                 "problem": f"compile error: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}"}
    _compiled[key] = found
    return dict(row, **found)


def run(name: str, which: str, shape_set: str) -> list[dict]:
    path = TEMPLATES / f"{name}.py"
    op = operators.get(name)
    mod = load_module(path, f"aot_template_{name}")
    if hasattr(mod, "_num_sms"):
        mod._num_sms = lambda device: SMS
    if hasattr(mod, "_l2_bytes"):
        mod._l2_bytes = lambda device: L2_BYTES
    chosen = configs(path) if which == "all" else [mod.CONFIG]
    rows = []
    for cfg in chosen:
        mod.CONFIG = cfg
        for shape in op.shape_set(shape_set):
            _launches.clear()
            try:
                mod.kernel(*meta_inputs(op, shape))
            except Exception as e:  # noqa: BLE001
                rows.append({"config": cfg, "shape": shape_id(shape), "kernel": None,
                             "problem": f"kernel() raised {type(e).__name__}: {e}"[:300]})
                continue
            for fn, args, kwargs in list(_launches):
                rows.append({"config": cfg, "shape": shape_id(shape), **compile_launch(fn, args, kwargs)})
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("operators", nargs="+")
    p.add_argument("--configs", choices=("all", "default"), default="default")
    p.add_argument("--shapes", default="eval")
    a = p.parse_args(argv)
    JITFunction.run = _record
    print(json.dumps({name: run(name, a.configs, a.shapes) for name in a.operators}, default=str))


if __name__ == "__main__":
    main()
