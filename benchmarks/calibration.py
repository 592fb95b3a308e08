"""The correctness rule calibrated against the libraries, per operator, shape and distribution.

    python -m benchmarks.calibration --out DIR [--operators softmax gemm ...] [--shapes eval]

For every operator, shape of the set and input distribution (one draw each, seed 0): the float64
reference (kept in float32, as the judge keeps it), the reference in the contract dtype, every
available library baseline, then operators._correctness.calibrate: each library's error
statistics, its verdict (pass: within the envelope of the reference and the other libraries;
fail; excluded by a named contract rule; error) with its margin, and the envelope. Kernels are
then judged against that envelope without joining it: the scripted template of the operator
(harnesses/scripted/templates/, on a GPU or under TRITON_INTERPRET=1) and `bias_1pct`, the
reference in the contract dtype times 1.01, which every envelope must reject.
Writes DIR/calibration.json and DIR/calibration.md, and prints a line per shape and distribution.

torch.compile baselines compile once per shape; shapes reached after --compile-budget-s leave
them out (recorded as skipped). max-autotune ones run only with --autotune. On an H200 the
default run takes a few minutes. --device cpu runs the same code on the smoke shapes' scale.
"""
from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ablate import operators  # noqa: E402
from ablate.operators._correctness import as_outputs, calibrate, judge_output, reference_outputs  # noqa: E402
from ablate.operators._operator import load_module, shape_id  # noqa: E402

TEMPLATES = ROOT / "harnesses" / "scripted" / "templates"


def versions() -> dict:
    def v(pkg):
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    info = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda}
    for pkg in ("triton", "liger-kernel", "quack-kernels", "flashinfer-python"):
        info[pkg] = v(pkg)
    info["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "none (CPU)"
    return info


def template(name: str, device: str):
    """The scripted template's kernel(*inputs), where it can run here; else None."""
    path = TEMPLATES / f"{name}.py"
    if not path.is_file() or (device != "cuda" and os.environ.get("TRITON_INTERPRET") != "1"):
        return None
    return load_module(path, f"calibration_template_{name}").kernel


def biased(outs):
    """The reference's outputs with every floating value 1% too large."""
    return tuple((t.float() * 1.01).to(t.dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                 for t in outs)


def libraries(op, device: str, compile_ok: bool, autotune: bool) -> tuple[dict, dict]:
    """(name -> fn of the baselines to calibrate with, name -> why one is left out)."""
    use, skipped = {}, {}
    for name, b in op.baselines.items():
        why = b.unavailable()
        if why is None and b.needs_cuda and device != "cuda":
            why = "needs CUDA"
        if why is None and "max_autotune" in name and not autotune:
            why = "max-autotune runs only with --autotune"
        if why is None and "compile" in name and not compile_ok:
            why = "run past --compile-budget-s before this shape"
        if why:
            skipped[name] = why
        else:
            use[name] = b.fn
    return use, skipped


def calibrate_one(op, shape: dict, dist: str, device: str, impls: dict, kernels: dict) -> dict:
    inputs = op.make_inputs(shape, 0, device, dist)
    t0 = time.perf_counter()
    ref = reference_outputs(op, inputs)
    t1 = time.perf_counter()
    cal = calibrate(op, inputs, ref, impls, dtype=shape.get("dtype"))
    t2 = time.perf_counter()
    judged = {}
    for name, fn in kernels.items():
        try:
            j = judge_output(fn(*inputs), ref, cal.envelope, inputs)
            judged[name] = {"ok": j.ok, "margin": _num(j.margin), "message": j.message,
                            "stats": [s.as_dict() for s in j.stats]}
        except Exception as e:  # a kernel that cannot run here is reported, not fatal
            judged[name] = {"ok": False, "margin": None, "message": f"raised {type(e).__name__}: {str(e)[:200]}",
                            "stats": []}
    del inputs, ref
    return {"envelope": cal.envelope.as_dict(), "reference": [s.as_dict() for s in cal.reference],
            "libraries": {k: {**v.as_dict(), "margin": _num(v.margin)} for k, v in cal.verdicts.items()},
            "kernels": judged, "seconds": {"reference64": round(t1 - t0, 3), "calibrate": round(t2 - t1, 3)}}


def _num(x):
    return None if x is None or not math.isfinite(x) else x


def run(args) -> dict:
    start = time.monotonic()
    device = args.device
    rows = []
    for name in args.operators:
        op = operators.get(name)
        tmpl = template(name, device)
        for shape in op.shape_set(args.shapes):
            compile_ok = time.monotonic() - start < args.compile_budget_s
            impls, skipped = libraries(op, device, compile_ok, args.autotune)
            for dist in args.distributions:
                kernels = {"bias_1pct": lambda *ins, _op=op: biased(as_outputs(_op.reference(*ins)))}
                if tmpl is not None:
                    kernels[f"template_{name}"] = tmpl
                t = time.monotonic()
                try:
                    row = calibrate_one(op, shape, dist, device, impls, kernels)
                except Exception as e:  # the operator itself failed here (out of memory, say)
                    row = {"failure": f"{type(e).__name__}: {str(e)[:300]}"}
                row.update(operator=name, shape=shape, shape_id=shape_id(shape), dist=dist, skipped=skipped)
                rows.append(row)
                _release(device)
                print(progress(row, time.monotonic() - t, time.monotonic() - start), flush=True)
    return {"environment": {**versions(), "device": device, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                            "command": "python -m benchmarks.calibration " + " ".join(sys.argv[1:])},
            "shapes": args.shapes, "rows": rows, "wall_s": round(time.monotonic() - start, 1)}


def _release(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def progress(row: dict, seconds: float, total: float) -> str:
    head = f"[{total:6.0f} s] {row['operator']} {row['shape_id']} {row['dist']}:"
    if "failure" in row:
        return f"{head} FAILED {row['failure']}"
    libs = " ".join(f"{k}={_cell(v['status'], v['margin'])}" for k, v in row["libraries"].items())
    kern = " ".join(f"{k}={_cell('pass' if v['ok'] else 'fail', v['margin'])}" for k, v in row["kernels"].items())
    return f"{head} {libs} | {kern} ({seconds:.1f} s)"


def _cell(status: str, margin) -> str:
    m = "inf" if margin is None else f"{margin:.2f}"
    return {"pass": m, "fail": f"FAIL {m}", "excluded": "excluded", "error": "ERROR"}.get(status, status)


def summary(res: dict) -> list[dict]:
    """Per operator and implementation: counts of each verdict and the worst margin with where."""
    out: dict[tuple, dict] = {}
    for r in res["rows"]:
        if "failure" in r:
            continue
        where = f"{r['shape_id']} {r['dist']}"
        entries = [(k, "library", v["status"], v["margin"], v.get("rule") or v["message"]) for k, v in
                   r["libraries"].items()]
        entries += [(k, "kernel", "pass" if v["ok"] else "fail", v["margin"], v["message"]) for k, v in
                    r["kernels"].items()]
        for name, kind, status, m, note in entries:
            s = out.setdefault((r["operator"], name), {"operator": r["operator"], "implementation": name, "kind": kind,
                                                      "pass": 0, "fail": 0, "excluded": 0, "error": 0,
                                                      "worst": -1.0, "at": "", "note": ""})
            s[status] += 1
            worst = math.inf if m is None else m
            pick = worst < s["worst"] if name == "bias_1pct" else worst > s["worst"]  # the closest call
            if s["worst"] < 0 or pick:
                s.update(worst=worst, at=where, note=(note or "")[:140])
    return list(out.values())


def markdown(res: dict) -> str:
    env = res["environment"]
    lines = [
        "# Correctness rule calibrated against the libraries", "",
        f"GPU {env['gpu']}, torch {env['torch']} (CUDA {env['cuda']}), triton {env['triton']}, liger-kernel "
        f"{env['liger-kernel']}, quack-kernels {env['quack-kernels']}, flashinfer-python {env['flashinfer-python']}, "
        f"Python {env['python']}; {env['date']}. Command: `{env['command']}` ({res['wall_s']} s).", "",
        "Margin: the worst error statistic over its bound (<= 1 passes). A library is judged against the envelope "
        "of the reference in the contract dtype and the *other* passing libraries; kernels (the scripted template, "
        "`bias_1pct` = the reference times 1.01) against the whole envelope. Statistics and the rule: "
        "operators/_correctness.py.", "",
        "## Summary per implementation", "",
        "For libraries and templates the worst (largest) margin; for `bias_1pct` the closest call (smallest).", "",
        "| operator | implementation | kind | pass | fail | excluded | error | margin | at | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary(res):
        m = "inf" if s["worst"] == math.inf else f"{s['worst']:.2f}"
        note = s["note"].replace("|", "/") if s["fail"] or s["excluded"] or s["error"] else ""
        lines.append(f"| {s['operator']} | {s['implementation']} | {s['kind']} | {s['pass']} | {s['fail']} | "
                     f"{s['excluded']} | {s['error']} | {m} | {s['at']} | {note} |")
    lines += ["", "## Envelope and margins per shape and distribution", "",
              "Bounds of the first output: rms error / scale, max error / (|ref| + size), fraction of elements "
              "beyond the tolerance; `ref` = the reference in the contract dtype, its own statistics.", "",
              "| operator | shape | dist | rms bound | max bound | frac bound | ref rms | ref max | margins |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if "failure" in r:
            lines.append(f"| {r['operator']} | {r['shape_id']} | {r['dist']} | - | - | - | - | - | "
                         f"FAILED: {r['failure'][:120]} |")
            continue
        b, ref = r["envelope"]["bounds"][0], r["reference"][0]
        cells = [f"{k} {_cell(v['status'], v['margin'])}" for k, v in r["libraries"].items()]
        cells += [f"{k} {_cell('pass' if v['ok'] else 'fail', v['margin'])}" for k, v in r["kernels"].items()]
        lines.append(f"| {r['operator']} | {r['shape_id']} | {r['dist']} | {b['rms']:.3g} | {b['max']:.3g} | "
                     f"{b['frac']:.3g} | {ref['rms']:.3g} | {ref['max']:.3g} | {', '.join(cells)} |")
    skipped = {(r["operator"], k): v for r in res["rows"] for k, v in r.get("skipped", {}).items()}
    if skipped:
        lines += ["", "## Left out", "", "| operator | baseline | why |", "|---|---|---|"]
        lines += [f"| {op} | {k} | {v} |" for (op, k), v in skipped.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for calibration.json and calibration.md")
    p.add_argument("--operators", nargs="+", default=list(operators.REGISTRY), help="operator names (default: all)")
    p.add_argument("--shapes", default="eval", help="shape set (default: eval)")
    p.add_argument("--distributions", nargs="+", default=list(operators.DISTRIBUTIONS),
                   help="input distributions (default: all)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--compile-budget-s", type=float, default=180.0,
                   help="torch.compile baselines are left out of shapes reached after this many seconds (default 180)")
    p.add_argument("--autotune", action="store_true", help="also calibrate with the max-autotune baselines")
    args = p.parse_args(argv)
    unknown = [n for n in args.operators if n not in operators.REGISTRY]
    if unknown:
        p.error(f"unknown operator(s) {', '.join(unknown)}; valid: {', '.join(operators.REGISTRY)}")
    bad = [d for d in args.distributions if d not in operators.DISTRIBUTIONS]
    if bad:
        p.error(f"unknown distribution(s) {', '.join(bad)}; valid: {', '.join(operators.DISTRIBUTIONS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA GPU here; --device cpu runs the same code without one")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = run(args)
    (out / "calibration.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    (out / "calibration.md").write_text(markdown(res))
    print(f"wrote {out / 'calibration.json'} and {out / 'calibration.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
