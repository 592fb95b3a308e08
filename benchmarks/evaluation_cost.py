"""What a warm evaluation costs, phase by phase, on the machine at hand (a GPU, or the CPU's
Triton interpreter).

    python -m benchmarks.evaluation_cost --kernel tests/ablate/evaluate/kernels/honest_triton.py \
        --operator rmsnorm --shapes smoke --repeats 3 [--pause 0] [--out FILE]

Evaluates one kernel --repeats times in one process, --pause seconds apart (an agent thinks
between evaluations, so the candidate process started ahead is ready by the next), and prints one
JSON line per evaluation: its wall seconds, `phase_seconds`, and each shape's `seconds`, judged time
(`time_ms`) and library times (`baselines_ms`). The first is cold (the judge and its library
process start). --cold also empties every cache for it (ablate's ceilings, envelopes and library
times, Inductor's and Triton's compiled kernels: a fresh temporary folder each), so its
`phase_seconds` (`judge_libraries`, `judge_ceilings`, `judge_envelopes`, `judge_baselines`) are
an operator's cold setup. The judge's progress lines, timestamped, go to stderr. --out writes the
lines and the machine to FILE.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks._lines import Lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernel", type=Path, required=True)
    p.add_argument("--operator", default="rmsnorm")
    p.add_argument("--shapes", default="smoke")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--cold", action="store_true", help="every cache empty (a fresh machine's first evaluation)")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.cold:  # before anything reads them: the judge and its library process inherit these
        import os
        import tempfile

        fresh = Path(tempfile.mkdtemp(prefix="ablate-cold-"))
        for var in ("ABLATE_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
            os.environ[var] = str(fresh / var.lower())
    import torch

    from ablate.evaluate import evaluate

    lines = Lines(a.out)
    for i in range(a.repeats):
        if i and a.pause:
            time.sleep(a.pause)
        t0 = time.perf_counter()
        r = evaluate(a.operator, a.kernel, shapes=a.shapes, seed=i,
                     progress=lambda m, t0=t0: print(f"[{time.perf_counter() - t0:7.1f} s] {m}", file=sys.stderr,
                                                     flush=True))
        row = {"evaluation": i, "verdict": r["verdict"], "wall_s": round(time.perf_counter() - t0, 3),
               "phase_seconds": r.get("phase_seconds"), "shapes": [s.get("seconds") for s in r["shapes"]],
               "time_ms": [(s.get("time_ms") or {}).get("median") for s in r["shapes"]],
               "baselines_ms": [s.get("baselines_ms") for s in r["shapes"]]}
        lines.add(row)
    lines.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
