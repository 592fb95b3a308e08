"""Library baselines of every operator: time, best library per shape, fraction of speed-of-light.

    python -m benchmarks.operators --out DIR [--operators softmax gemm ...] [--shapes eval]

For each operator and shape: each baseline's median time (triton.testing.do_bench, L2 flushed
between calls, bf16 inputs from the 'normal' distribution, seed 0), whether its output passes the
one correctness rule (operators/_correctness.py; the envelope of the reference in the contract
dtype alone: benchmarks/calibration.py calibrates it against the libraries), and its error
margin, and its fraction of speed-of-light: the roofline floor
max(bytes / copy bandwidth, flops / matmul rate) over its time, with both ceilings measured in
this run as the best over a few sizes. Writes DIR/results.json and DIR/results.md (GPU, driver,
library versions, command, and a column of the reference measurements in
shared/reference/h200-library-baselines.md where the same operator and shape appear).

torch.compile baselines compile on first call. max-autotune ones run in a last pass (GEMM, grouped
GEMM, attention first) that stops after --autotune-budget-s; other compile baselines stop once the
run passes --budget-s. Each skip is recorded with its reason, so a full run stays within about six
minutes on an H200 and says what it left out.
--device cpu runs the same code with a wall-clock timer (a check of this script, not a measurement).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ablate import operators  # noqa: E402
from ablate.operators._correctness import calibrate, reference_outputs  # noqa: E402
from ablate.operators._operator import shape_id  # noqa: E402

REFERENCE_MD = [ROOT / "shared" / "reference" / "h200-library-baselines.md",
                ROOT.parent / "shared" / "reference" / "h200-library-baselines.md"]
# Names in the reference measurements -> ours (the operator and baselines measured the same way).
REF_OPS = {"attention_causal": "attention"}
REF_IMPLS = {"torch_eager_manual": "torch_eager", "torch_compile_maxautotune": "torch_compile_max_autotune",
             "sdpa_FLASH_ATTENTION": "sdpa_flash", "sdpa_CUDNN_ATTENTION": "sdpa_cudnn",
             "sdpa_EFFICIENT_ATTENTION": "sdpa_efficient"}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timer(device: str):
    """fn -> median milliseconds: do_bench on a GPU, a wall-clock median on the CPU."""
    if device == "cuda":
        from triton.testing import do_bench

        return lambda fn: float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    def wall(fn, n=5):
        times = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return sorted(times)[n // 2]

    return wall


def ceilings(device: str, measure) -> dict:
    """Copy bandwidth (bytes read + written per second) and bf16 matmul rate, best over sizes:
    the evaluator's own measurement (the same sizes and operations), timed by this run's timer."""
    if device != "cuda":
        return {"copy_bytes_per_s": 1e10, "matmul_flops_per_s": 1e11, "measured": []}
    from ablate.evaluate._gpu import best_rates, ceiling_rows

    rows = ceiling_rows(measure)
    copy, matmul = best_rates(rows)
    return {"copy_bytes_per_s": copy, "matmul_flops_per_s": matmul, "measured": rows}


def reference_rows(path: Path | None) -> dict[tuple[str, str, str], float]:
    """(operator, 'AxB...', baseline) -> ms from the reference measurements' table."""
    if path is None or not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"[\d.]+", cells[3] or ""):
            op = REF_OPS.get(cells[0], cells[0])
            out[(op, cells[1], REF_IMPLS.get(cells[2], cells[2]))] = float(cells[3])
    return out


def dims(shape: dict) -> str:
    return "x".join(str(v) for k, v in shape.items() if k != "dtype" and isinstance(v, int))


def versions() -> dict:
    def v(pkg):
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    info = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.version.cuda,
            "triton": v("triton"), "liger-kernel": v("liger-kernel"), "quack-kernels": v("quack-kernels")}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        try:
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=30).stdout.split("\n")[0].strip()
        except (OSError, subprocess.SubprocessError):
            info["driver"] = "unknown"
    else:
        info["gpu"], info["driver"] = "none (CPU: not a GPU measurement)", "-"
    return info


def run_baseline(op, b, inputs, expected, env, device, measure) -> dict:
    reason = b.unavailable()
    if reason:
        return {"status": "unavailable", "reason": reason}
    if b.needs_cuda and device != "cuda":
        return {"status": "skipped", "reason": "needs CUDA"}
    try:
        t = time.monotonic()
        out = b.fn(*inputs)  # first call: compiles / autotunes where the library does
        sync(device)
        first_s = time.monotonic() - t
        j = op.verify(out, inputs, expected, env)
        del out
        ms = measure(lambda: b.fn(*inputs))
    except Exception as e:  # a library that fails on this shape is reported, not fatal
        return {"status": "error", "reason": f"{type(e).__name__}: {e}"[:300]}
    return {"status": "ok", "ms": ms, "correct": j.ok, "max_err": j.max_abs, "margin": j.margin, "check": j.message,
            "first_call_s": round(first_s, 2)}


def autotuned(name: str) -> bool:
    return "max_autotune" in name


# max-autotune compiles for minutes in all; it runs last, where it matters most first (GEMMs).
AUTOTUNE_ORDER = ["gemm", "grouped_gemm", "attention"]


def bench(args) -> dict:
    device = args.device
    measure = timer(device)
    start = time.monotonic()
    info = {**versions(), "device": device,
            "command": "python -m benchmarks.operators " + " ".join(sys.argv[1:]), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    ceil = ceilings(device, measure)
    refs = reference_rows(next((p for p in ([Path(args.reference_md)] if args.reference_md else REFERENCE_MD) if p.is_file()), None))
    rows = {}

    def visit(name, shape, which, skip_reason):
        """Time the baselines of one operator and shape that `which` selects."""
        op = operators.get(name)
        row = rows.setdefault((name, shape_id(shape)), {
            "operator": name, "shape": shape, "shape_id": shape_id(shape), "bytes": op.bytes(shape),
            "flops": op.flops(shape), "floor_ms": 1e3 * max(op.bytes(shape) / ceil["copy_bytes_per_s"],
                                                           op.flops(shape) / ceil["matmul_flops_per_s"]),
            "baselines": {}})
        chosen = {k: b for k, b in op.baselines.items() if which(k)}
        if not chosen:
            return
        inputs = op.make_inputs(shape, 0, device, "normal")
        expected = reference_outputs(op, inputs)  # float64, kept in float32
        env = calibrate(op, inputs, expected, dtype=shape.get("dtype")).envelope
        for bname, b in chosen.items():
            reason = skip_reason(bname)
            r = {"status": "skipped", "reason": reason} if reason else run_baseline(
                op, b, inputs, expected, env, device, measure)
            if r["status"] == "ok":
                r["sol"] = row["floor_ms"] / r["ms"]
            r["doc_ms"] = refs.get((name, dims(shape), bname))
            row["baselines"][bname] = r
            print(f"{name} {shape_id(shape)} {bname}: {r.get('ms', r['status'])}", flush=True)
        del inputs, expected, env
        if device == "cuda":
            torch.cuda.empty_cache()

    def compile_cutoff(bname):
        if "compile" in bname and time.monotonic() - start > args.budget_s:
            return f"run past --budget-s ({args.budget_s:.0f} s) before this compile"
        return None

    for name in args.operators:
        for shape in operators.get(name).shape_set(args.shapes):
            visit(name, shape, lambda k: not autotuned(k), compile_cutoff)
    autotune_start = time.monotonic()
    order = [n for n in AUTOTUNE_ORDER if n in args.operators] + [n for n in args.operators if n not in AUTOTUNE_ORDER]
    for name in order:
        for shape in operators.get(name).shape_set(args.shapes):
            visit(name, shape, autotuned, lambda k: (
                f"max-autotune time past --autotune-budget-s ({args.autotune_budget_s:.0f} s)"
                if time.monotonic() - autotune_start > args.autotune_budget_s else None))
    out = []
    for name in args.operators:  # report order: operators as asked, shapes as listed
        for shape in operators.get(name).shape_set(args.shapes):
            row = rows[(name, shape_id(shape))]
            row["baselines"] = {k: row["baselines"][k] for k in operators.get(name).baselines if k in row["baselines"]}
            good = {k: r for k, r in row["baselines"].items() if r["status"] == "ok" and r["correct"]}
            best = min(good, key=lambda k: good[k]["ms"]) if good else None
            row.update(best=best, best_ms=good[best]["ms"] if best else None, best_sol=good[best]["sol"] if best else None)
            out.append(row)
    return {"environment": info, "ceilings": ceil, "shapes": args.shapes, "rows": out,
            "wall_s": round(time.monotonic() - start, 1)}


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def markdown(res: dict) -> str:
    env, ceil = res["environment"], res["ceilings"]
    lines = [
        "# Library baselines per operator and shape", "",
        f"GPU {env['gpu']}, driver {env['driver']}, torch {env['torch']} (CUDA {env['cuda']}), triton {env['triton']}, "
        f"liger-kernel {env['liger-kernel']}, quack-kernels {env['quack-kernels']}, Python {env['python']}; {env['date']}.",
        f"Command: `{env['command']}` ({res['wall_s']} s).", "",
        f"Ceilings measured in this run (best over sizes): copy {ceil['copy_bytes_per_s'] / 1e12:.2f} TB/s "
        f"(bytes read + written), bf16 matmul {ceil['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s. SOL = roofline floor "
        "max(bytes / copy, flops / matmul) over the time. Times: triton.testing.do_bench median, L2 flushed, "
        "bf16, 'normal' inputs. `doc ms`: the same operator, shape and baseline in "
        "shared/reference/h200-library-baselines.md.", "",
        "## Best library per shape", "",
        "| operator | shape | best library | ms | SOL | floor ms |", "|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        lines.append(f"| {r['operator']} | {dims(r['shape'])} | {r['best'] or 'none correct'} | "
                     f"{fmt(r['best_ms'], '.4f')} | {fmt(r['best_sol'] and 100 * r['best_sol'], '.0f')}% | {r['floor_ms']:.4f} |")
    lines += ["", "## Every baseline", "",
              "| operator | shape | baseline | ms | SOL | correct | doc ms | note |", "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        for name, b in r["baselines"].items():
            if b["status"] == "ok":
                note = b["check"] or ""
                lines.append(f"| {r['operator']} | {dims(r['shape'])} | {name} | {b['ms']:.4f} | {100 * b['sol']:.0f}% | "
                             f"{'yes' if b['correct'] else 'NO'} | {fmt(b['doc_ms'], '.4f')} | {note[:120]} |")
            else:
                lines.append(f"| {r['operator']} | {dims(r['shape'])} | {name} | - | - | - | {fmt(b['doc_ms'], '.4f')} | "
                             f"{b['status']}: {b['reason'][:120]} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for results.json and results.md")
    p.add_argument("--operators", nargs="+", default=list(operators.REGISTRY), help="operator names (default: all)")
    p.add_argument("--shapes", default="eval", help="shape set (default: eval)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--budget-s", type=float, default=200.0,
                   help="torch.compile baselines after this many seconds are skipped (default 200)")
    p.add_argument("--autotune-budget-s", type=float, default=80.0,
                   help="seconds for the max-autotune pass, run last, GEMMs first (default 80)")
    p.add_argument("--reference-md", default=None, help="h200-library-baselines.md (default: shared/reference/)")
    args = p.parse_args(argv)
    unknown = [n for n in args.operators if n not in operators.REGISTRY]
    if unknown:
        p.error(f"unknown operator(s) {', '.join(unknown)}; valid: {', '.join(operators.REGISTRY)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA GPU here; --device cpu checks the script without measuring anything")
    res = bench(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    (out / "results.md").write_text(markdown(res))
    print(f"wrote {out / 'results.json'} and {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
