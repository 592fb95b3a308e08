"""How fast are the store's index and a large study's resume check? (any machine; no GPU needed)

    python benchmarks/store.py --out DIR [--trials 10000] [--shapes-per-record 8]

A study of `--trials` trials (ten operators x four arms x seeds) is planned, a synthetic record is
written for every trial (the committed v1 fixture's record, upgraded, with its evaluation spread
over `--shapes-per-record` shapes: about the size of a real record), and then timed:
  index (cold)   ablate.store.index on the study with no index.parquet: every record read and
                 validated, the Parquet index written (target: under 30 s for 10,000)
  index (warm)   the same with the index in place and nothing changed (one stat per trial)
  read_records   every record as a typed TrialRecord, through the index
  plan + resume  ablate.runner.pending: the study expanded into TrialSpecs and checked against
                 the store, all stored, then again with 10 trial directories removed (target:
                 under 5 s for 10,000); in this process, after the operator modules are imported,
                 and as a fresh `python -c` process (interpreter start and the torch import included)

Writes DIR/results.json and DIR/results.md (machine, CPU count, versions, the command).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIXTURE = ROOT / "tests/ablate/data/store-v1/default/rmsnorm--goal_only--scripted--s0--47e47fac/record.json"
OPERATORS = ["rmsnorm", "layernorm", "softmax", "cross_entropy", "swiglu", "rope", "gemm", "attention",
             "grouped_gemm", "topk"]
ARMS = {"goal_only": {"name": "goal_only", "mechanisms": {}},
        "kda05": {"name": "kda05", "mechanisms": {"knowledge": {}, "workflow": {}, "reviewer": {"rounds": 1}}},
        "goal_only+profiler": {"name": "goal_only+profiler", "mechanisms": {"profiler": {}}},
        "goal_only+reviewer": {"name": "goal_only+reviewer", "mechanisms": {"reviewer": {"rounds": 1}}}}


def study_config(trials: int) -> dict:
    seeds = -(-trials // (len(OPERATORS) * len(ARMS)))
    return {"study": {"name": "bench", "seeds": list(range(seeds)), "arms": ARMS, "baseline_arm": "goal_only",
                      "model": {"name": "scripted", "provider": "scripted", "id": "scripted-kernel-search-v1",
                                "policy": "kernel-search", "actions": []}},
            "operators": {"names": OPERATORS, "shapes": {"public": "public", "eval": "eval"}, "external_baselines": {}},
            "budget": {"turns": 60, "tokens": 4000000, "cost_usd": 50.0, "wall_s": 7200, "tool_s": 3600, "gpu_s": 3600},
            "sandbox": {"confinement": "bwrap"}, "parallel": "auto", "analysis": {"rejected_as": 1.0}}


def write_records(specs, study_dir: Path, shapes: int) -> int:
    """One synthetic, schema-valid record per spec; returns the bytes written."""
    from dataclasses import asdict

    from ablate.record import TrialRecord

    base = TrialRecord.from_dict(json.loads(FIXTURE.read_text())).to_dict()
    shape = base["evaluation"]["shapes"][0]
    base["evaluation"]["shapes"] = [dict(shape, shape_id=f"{shape['shape_id']}#{i}") for i in range(shapes)]
    total = 0
    for i, s in enumerate(specs):
        rec = copy.copy(base)
        rec.update(trial_id=s.trial_id, study=s.study, arm=s.arm, match_key=s.match_key, operator=s.operator,
                   seed=s.seed, spec=asdict(s), operator_source=dict(s.operator_set),
                   evaluation=dict(base["evaluation"], geomean_speedup=0.5 + (i % 97) / 50))
        d = study_dir / s.trial_id
        d.mkdir(parents=True)
        data = json.dumps(rec, indent=1, default=str)
        (d / "record.json").write_text(data)
        total += len(data)
    return total


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--trials", type=int, default=10_000)
    p.add_argument("--shapes-per-record", type=int, default=8)
    p.add_argument("--store", type=Path, help="where to build the synthetic store (default: a temporary directory)")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ablate-store-bench-", dir=a.store))
    results: dict = {"trials": a.trials, "shapes_per_record": a.shapes_per_record}
    try:
        t_import, _ = timed(lambda: __import__("ablate.runner"))
        from ablate import runner
        from ablate.store import INDEX, index, read_records

        cfg = study_config(a.trials)
        t_plan_first, specs = timed(lambda: runner.plan(cfg))
        specs = specs[: a.trials]
        cfg["study"]["seeds"] = sorted({s.seed for s in specs})
        study = work / "bench"
        print(f"writing {len(specs)} synthetic records under {study} ...", file=sys.stderr)
        t_write, nbytes = timed(lambda: write_records(specs, study, a.shapes_per_record))
        results["store"] = {"records": len(specs), "record_json_mb": round(nbytes / 1e6, 1),
                            "write_s": round(t_write, 2)}
        print("index (cold) ...", file=sys.stderr)
        t_cold, df = timed(lambda: index(study))
        assert len(df) == len(specs) and not df["error"].notna().any()
        t_warm, _ = timed(lambda: index(study))
        t_read, recs = timed(lambda: read_records(study))
        assert len(recs) == len(specs)
        results["index"] = {"cold_s": round(t_cold, 2), "warm_s": round(t_warm, 3), "read_records_s": round(t_read, 2),
                            "parquet_mb": round((study / INDEX).stat().st_size / 1e6, 1), "target_cold_s": 30}
        print("plan + resume check ...", file=sys.stderr)
        t_all_done, (all_specs, todo) = timed(lambda: runner.pending(cfg, work, log=lambda *x: None))
        assert len(all_specs) == len(specs) and todo == []
        for s in specs[:10]:
            shutil.rmtree(study / s.trial_id)
        t_ten_left, (_, todo) = timed(lambda: runner.pending(cfg, work, log=lambda *x: None))
        assert len(todo) == 10
        code = ("import json, sys, time; t = time.perf_counter(); from ablate import runner; "
                "specs, todo = runner.pending(json.loads(open(sys.argv[1]).read()), sys.argv[2], log=lambda *a: None); "
                "print(len(specs), len(todo), round(time.perf_counter() - t, 3))")
        (work / "cfg.json").write_text(json.dumps(cfg))
        t_proc, out = timed(lambda: subprocess.run([sys.executable, "-c", code, str(work / "cfg.json"), str(work)],
                                                   cwd=ROOT, capture_output=True, text=True, check=True))
        n, left, inner = out.stdout.split()
        assert int(n) == len(specs) and int(left) == 10
        results["plan"] = {"first_plan_s_incl_operator_imports": round(t_plan_first, 2),
                           "import_ablate_runner_s": round(t_import, 2),
                           "plan_and_resume_all_stored_s": round(t_all_done, 2),
                           "plan_and_resume_10_missing_s": round(t_ten_left, 2),
                           "fresh_process_wall_s": round(t_proc, 2), "fresh_process_after_start_s": float(inner),
                           "target_s": 5}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    import pandas
    import pyarrow

    results["machine"] = {"cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
                          "python": platform.python_version(), "pandas": pandas.__version__,
                          "pyarrow": pyarrow.__version__, "platform": platform.platform()}
    results["command"] = "python benchmarks/store.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))
    (a.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    i, pl = results["index"], results["plan"]
    md = [f"# Store benchmark: {results['trials']} synthetic trial records", "",
          f"`{results['command']}` on {results['machine']['affinity']} CPU(s), Python {results['machine']['python']}, "
          f"pandas {pandas.__version__}, pyarrow {pyarrow.__version__}.", "",
          f"Records: {results['store']['records']} ({results['store']['record_json_mb']} MB of record.json, "
          f"{a.shapes_per_record} evaluated shapes each), written in {results['store']['write_s']} s.", "",
          "| what | seconds | target |", "|---|---|---|",
          f"| index, cold (every record read, validated, index.parquet written) | {i['cold_s']} | < 30 |",
          f"| index, warm (nothing changed) | {i['warm_s']} | |",
          f"| read_records (typed records, through the index) | {i['read_records_s']} | |",
          f"| plan + resume check, all stored (in process) | {pl['plan_and_resume_all_stored_s']} | < 5 |",
          f"| plan + resume check, 10 missing (in process) | {pl['plan_and_resume_10_missing_s']} | < 5 |",
          f"| the same as a fresh process, after interpreter start | {pl['fresh_process_after_start_s']} | |",
          f"| the same as a fresh process, wall clock (start and torch import included) | {pl['fresh_process_wall_s']} | |",
          "", f"First plan in this process, operator modules imported with it: {pl['first_plan_s_incl_operator_imports']} s."
          f" index.parquet: {i['parquet_mb']} MB."]
    (a.out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
