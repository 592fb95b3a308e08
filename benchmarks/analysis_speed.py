"""How long analysis takes over a large store of synthetic trial records.

    python -m benchmarks.analysis_speed --out DIR [--trials 10000] [--store PATH]

Writes ``--trials`` records (10 operators x seeds x 10 arms, 10% rejected, each with a transcript
of two evaluate calls and its model calls) with ``benchmarks.synthetic`` unless ``--store`` already
holds them, then times, each in a fresh process: the tables (``tables.summary`` with transcripts
read: every table, mechanism use, best-so-far curves) and the whole report (``report.write``:
tables, CSV and Markdown, plots, the HTML index and a page per trial). Targets on 2 cores: tables
under 10 s, report under 30 s. Writes DIR/speed.md.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

OPERATORS = ["rmsnorm", "layernorm", "softmax", "cross_entropy", "swiglu", "rope", "gemm", "attention", "grouped_gemm", "topk"]
ARMS = ["goal_only", "kda05"] + [f"goal_only+m{i}" for i in range(8)]

TABLES = """
import sys, time
from ablate.analysis import tables
t, c = time.perf_counter(), time.process_time()
s = tables.summary(sys.argv[1], "goal_only", activity=True)
print(f"{time.perf_counter() - t:.2f} {time.process_time() - c:.2f} {len(s['trials'])} {len(s['ratios'])}")
"""
REPORT = """
import sys, time
from ablate.analysis import report
t, c = time.perf_counter(), time.process_time()
report.write(sys.argv[1], sys.argv[2], "goal_only", quiet=True)
print(f"{time.perf_counter() - t:.2f} {time.process_time() - c:.2f}")
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--trials", type=int, default=10_000)
    p.add_argument("--store", type=Path, help="a store to reuse (default: DIR/store, written if missing)")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    store = a.store or a.out / "store"
    if not (store / "study").is_dir():
        import numpy as np

        from benchmarks.synthetic import write_study

        seeds = max(1, a.trials // (len(OPERATORS) * len(ARMS)))
        t = time.perf_counter()
        truth = {arm: 1.0 + 0.02 * i for i, arm in enumerate(ARMS)}
        write_study(store, truth, OPERATORS, seeds, sd=0.1, reject=0.1, rng=np.random.default_rng(0))
        print(f"wrote {seeds * len(OPERATORS) * len(ARMS)} records in {time.perf_counter() - t:.0f} s", flush=True)
    study = store / "study"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    run = lambda code, *args: subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,  # noqa: E731
                                             text=True, check=True).stdout.split()
    tables_s, tables_cpu, n, ratios = run(TABLES, str(study))
    report_s, report_cpu = run(REPORT, str(study), str(a.out / "report"))
    cores = len(os.sched_getaffinity(0))
    load = os.getloadavg()[0]
    lines = [f"# Analysis speed over {n} synthetic trial records ({cores} cores, load average {load:.1f} at the end)", "",
             f"- tables (every table, transcripts read for mechanism use and best-so-far, {ratios} ratio rows): "
             f"{tables_s} s wall, {tables_cpu} s CPU (target < 10 s)",
             f"- report (tables, CSV, Markdown, plots, HTML index and {n} trial pages): {report_s} s wall, "
             f"{report_cpu} s CPU (target < 30 s)"]
    (a.out / "speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
