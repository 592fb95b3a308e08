"""What a candidate's first Triton compile costs in a fresh process, with and without the evaluator's
own warm-up compile (`_gpu.warm_triton_compiler`, run in a candidate process started ahead): each
repeat starts a fresh interpreter with a fresh Triton cache, optionally warms the compiler, then
compiles the scripted arm's RMSNorm kernel (`_rmsnorm_rows`, a row of 4096) and times that
compile, its module's import included. No GPU is needed: the kernels
are compiled for --arch (sm_90 by default: H100, H200), not launched.

    python -m benchmarks.triton_first_compile [--arch 90] [--repeats 5] [--out FILE]

Prints one JSON line per (repeat, warmed) and a summary line: the median seconds of the kernel's
compile either way, and of the warm-up itself.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._lines import Lines, positive

CHILD = r"""
import importlib.util, json, sys, time
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton
from ablate.evaluate import _gpu

target = GPUTarget("cuda", int(sys.argv[1]), 32)
t0 = time.perf_counter()
if sys.argv[2] == "1":
    _gpu.warm_triton_compiler(target)
t1 = time.perf_counter()
spec = importlib.util.spec_from_file_location("rmsnorm", "harnesses/scripted/templates/rmsnorm.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
signature = {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "M": "i32", "N": "constexpr", "stride": "i32",
             "eps": "fp32", "ROWS": "constexpr", "BLOCK": "constexpr"}
triton.compile(ASTSource(module._rmsnorm_rows, signature, {"N": 4096, "ROWS": 1, "BLOCK": 4096}), target=target)
print(json.dumps({"warm_up_s": t1 - t0, "compile_s": time.perf_counter() - t1}))
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=int, default=90, help="compute capability to compile for (90: sm_90)")
    p.add_argument("--repeats", type=positive, default=5)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    lines = Lines(a.out)
    root = Path(__file__).resolve().parent.parent
    for r in range(a.repeats):
        for warmed in (False, True):
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TRITON_CACHE_DIR": cache, "PYTHONPATH": str(root)}
                env.pop("TRITON_INTERPRET", None)
                done = subprocess.run([sys.executable, "-c", CHILD, str(a.arch), "1" if warmed else "0"], env=env,
                                      capture_output=True, text=True, cwd=root)
            if done.returncode != 0:
                raise SystemExit(f"the compile failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
            lines.add({"repeat": r, "warmed": warmed, **json.loads(done.stdout.strip().splitlines()[-1])})

    def median(key: str, warmed: bool) -> float:
        return statistics.median(row[key] for row in lines.rows[1:] if row["warmed"] is warmed)

    lines.add({"summary": True, "arch": a.arch, "compile_s_median": median("compile_s", False),
               "compile_s_median_after_warm_up": median("compile_s", True),
               "warm_up_s_median": median("warm_up_s", True)})
    lines.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
