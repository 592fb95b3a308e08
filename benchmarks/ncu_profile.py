"""Hardware counters of a scripted template and of the libraries, side by side, on one shape each:
where a template's time goes when it falls short of a library (DRAM throughput, L2 hits, occupancy,
what its warps wait on), so that a shortfall is explained by the roofline term that binds rather
than tuned away.

    python -m benchmarks.ncu_profile --out DIR [--case OP SHAPE [CONFIG]] ... [--libraries NAME ...]

SHAPE is written as in the tables ("M=8192,N=5120"; dtype bfloat16 unless given), CONFIG a JSON
object for the template (its CONFIG when left out). Without --case, the shapes where the template
was furthest below the best library, each beside that library and one more; --libraries replaces
those. Each implementation runs in its own process
under Nsight Compute (`ncu --clock-control none`, caches flushed before each kernel, only the call
inside an NVTX range profiled, after warm-up calls that compile). Writes DIR/ncu_profile.md,
DIR/ncu_profile.json and ncu's own CSV of each under DIR/raw. Needs a CUDA GPU and an ncu that
may read the counters; `--render` writes the table again from the JSON, anywhere."""
from __future__ import annotations

import argparse
import csv
import json
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ablate.harnesses.mechanisms.profiler import find_ncu  # noqa: E402  (the profiler's search of ncu's install places)

TEMPLATES = ROOT / "harnesses" / "scripted" / "templates"
RANGE = "profiled"
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis", "WarpStateStats")
# (column, ncu section, ncu metric name) shown in the table; every metric read is in the JSON
SHOWN = (("DRAM %", "GPU Speed Of Light Throughput", "DRAM Throughput"),
         ("SM %", "GPU Speed Of Light Throughput", "Compute (SM) Throughput"),
         ("L2 hit %", "Memory Workload Analysis", "L2 Hit Rate"),
         ("occupancy % (theory)", "Occupancy", "Achieved Occupancy"),
         ("threads", "Launch Statistics", "Block Size"),
         ("registers", "Launch Statistics", "Registers Per Thread"),
         ("grid", "Launch Statistics", "Grid Size"),
         ("cycles / issue", "Warp State Statistics", "Warp Cycles Per Issued Instruction"))
# The default cases: the eval shapes where the scripted policy's kernel was furthest below the best
# library on the H200 (benchmarks/results/h200-all-ten), with the configuration it submitted and the
# libraries to set beside it (the best one there first).
DEFAULT_CASES = [
    ("rmsnorm", "M=8192,N=5120", None, ("quack", "torch_compile")),
    ("layernorm", "M=8192,N=5120", None, ("torch_compile", "quack")),
    ("layernorm", "M=32768,N=8192", None, ("torch_compile", "quack")),
    ("softmax", "M=2048,N=128256", '{"block": 4096, "num_warps": 4, "max_width": 16384}', ("quack", "torch_compile")),
    ("attention", "B=4,H=32,S=4096,D=128",
     '{"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3, "tma": 1}', ("sdpa_cudnn", "sdpa_flash")),
]


def parse_shape(text: str) -> dict:
    shape = {"dtype": "bfloat16"}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if not value:
            raise SystemExit(f"error: shape {text!r}: write it as K=V,K=V (e.g. M=8192,N=5120)")
        shape[key.strip()] = value if key.strip() == "dtype" else int(value)
    return shape


def child(name: str, shape_text: str, impl: str, config: str | None) -> None:
    """Runs one implementation: warm-up calls, then one call inside the NVTX range ncu profiles."""
    import torch

    from ablate import operators
    from ablate.operators._operator import load_module

    op = operators.get(name)
    inputs = op.make_inputs(parse_shape(shape_text), 0, "cuda", "normal")
    if impl == "template":
        mod = load_module(TEMPLATES / f"{name}.py", f"ncu_template_{name}")
        if config:
            mod.CONFIG = json.loads(config)
        fn = mod.kernel
    else:
        fn = op.baselines[impl].fn
    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(RANGE)
    fn(*inputs)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


def profile(ncu: str, name: str, shape: str, impl: str, config: str | None, raw: Path) -> dict:
    """One implementation under ncu; its CSV is kept in `raw`, what the table reads comes back."""
    cmd = [ncu, "--clock-control", "none", "--cache-control", "all", "--nvtx", "--nvtx-include", f"{RANGE}/",
           *[a for s in SECTIONS for a in ("--section", s)], "--csv", "--page", "details",
           sys.executable, "-m", "benchmarks.ncu_profile", "--child", name, shape, impl, config or ""]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    raw.write_text(proc.stdout)
    kernels = parse_details(proc.stdout)
    if proc.returncode != 0 or not kernels:
        tail = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-3:]
        return {"kernels": [], "error": f"ncu exited {proc.returncode}, {len(kernels)} kernels read: "
                                        f"{' | '.join(tail)[:400]}"}
    return {"kernels": kernels, "error": None}


def parse_details(stdout: str) -> list[dict]:
    """ncu's `--csv --page details` output (one row per metric or rule, ncu's own messages on lines
    that are not CSV) as one {name, metrics, rules} per profiled kernel, in launch order."""
    rows = [ln for ln in stdout.splitlines() if ln.startswith('"')]
    kernels: dict[str, dict] = {}
    for r in csv.DictReader(rows):
        k = kernels.setdefault(r["ID"], {"name": r["Kernel Name"][:80], "metrics": {}, "rules": {}})
        if r.get("Metric Name"):
            k["metrics"][f"{r['Section Name']}/{r['Metric Name']}"] = f"{r['Metric Value']} {r['Metric Unit']}".strip()
        if r.get("Rule Name") and r.get("Rule Description"):
            k["rules"][r["Rule Name"]] = r["Rule Description"]
    return list(kernels.values())


def _number(text: str | None) -> float | None:
    try:
        return float(text.split()[0].replace(",", "")) if text else None
    except ValueError:
        return None


def duration_us(kernel: dict) -> float | None:
    value = kernel["metrics"].get("GPU Speed Of Light Throughput/Duration")
    if value is None:
        return None
    n, unit = _number(value), value.split()[-1]
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1.0)
    return None if n is None else n * scale


def dram_mb(kernel: dict) -> float | None:
    """Megabytes the kernel moved to and from DRAM: its DRAM throughput times its duration (the
    bytes, unlike the percentage, say whether a kernel reads its input more than once)."""
    rate, us = kernel["metrics"].get("Memory Workload Analysis/Memory Throughput"), duration_us(kernel)
    n = _number(rate)
    if n is None or us is None:
        return None
    scale = {"byte/s": 1.0, "Kbyte/s": 1e3, "Mbyte/s": 1e6, "Gbyte/s": 1e9, "Tbyte/s": 1e12}.get(rate.split()[-1])
    return None if scale is None else n * scale * us * 1e-6 / 1e6


def occupancy_bound(metrics: dict) -> str:
    """How many blocks of the kernel an SM holds at once and what stops one more ("3: registers"):
    the smallest of ncu's per-resource block limits."""
    limits = {key.removeprefix("Occupancy/Block Limit ").lower(): _number(value)
              for key, value in metrics.items() if key.startswith("Occupancy/Block Limit ")}
    limits = {name: n for name, n in limits.items() if n is not None}
    if not limits:
        return ""
    least = min(limits.values())
    return f"{least:.0f}: " + ", ".join(name for name, n in limits.items() if n == least)


def markdown(meta: dict, results: list[dict]) -> str:
    lines = [f"# Hardware counters on {meta['gpu']}", "", f"torch {meta['torch']}; {meta['ncu']}.",
             f"Command: `{meta['command']}`. One call each, caches flushed, clocks not locked. "
             "Percentages are of the device's peak; DRAM MB is DRAM throughput times duration; 'cycles / "
             "issue' is how long a warp waits between two instructions it issues.", "",
             "| operator | shape | implementation | kernel | us | DRAM MB | " + " | ".join(c for c, _, _ in SHOWN)
             + " | blocks an SM holds, bound by |",
             "|---|---|---|---|---|---|" + "---|" * len(SHOWN) + "---|"]
    for r in results:
        if r["error"]:
            lines.append(f"| {r['operator']} | {r['shape']} | {r['impl']} | {r['error']} |" + " |" * (len(SHOWN) + 3))
            continue
        for k in r["kernels"]:
            m = k["metrics"]
            cells = []
            for column, section, metric in SHOWN:
                value = m.get(f"{section}/{metric}", "").split(" ")[0]  # the unit is in the column's name
                if column.startswith("occupancy") and value:
                    value = f"{_number(value):.0f} ({_number(m.get('Occupancy/Theoretical Occupancy')) or 0:.0f})"
                cells.append(value)
            lines.append(f"| {r['operator']} | {r['shape']} | {r['impl']} | `{k['name'][:40]}` | "
                         f"{duration_us(k) or float('nan'):.1f} | {dram_mb(k) or float('nan'):.1f} | "
                         + " | ".join(cells) + f" | {occupancy_bound(m)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], argv[2], argv[3], argv[4] or None)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--render", action="store_true",
                    help="only write DIR/ncu_profile.md again from DIR/ncu_profile.json (no GPU needed)")
    ap.add_argument("--case", nargs="+", action="append", metavar="OP SHAPE [CONFIG]",
                    help="an operator, a shape and optionally the template's configuration (JSON); repeatable")
    ap.add_argument("--libraries", nargs="+",
                    help="library baselines to profile beside the template, where the operator has them")
    args = ap.parse_args(argv)
    if args.render:
        stored = args.out / "ncu_profile.json"
        if not stored.is_file():
            ap.error(f"--render: {stored} does not exist; give the --out of an earlier run")
        data = json.loads(stored.read_text())
        (args.out / "ncu_profile.md").write_text(markdown(data["meta"], data["results"]))
        return 0
    import torch

    from ablate import operators

    cases = []
    for case in args.case or []:
        if len(case) not in (2, 3) or case[0] not in operators.REGISTRY:
            ap.error(f"--case {' '.join(case)}: give an operator ({', '.join(sorted(operators.REGISTRY))}), "
                     "a shape and optionally a JSON configuration")
        parse_shape(case[1])
        if len(case) == 3:
            try:
                json.loads(case[2])
            except ValueError:
                ap.error(f"--case {' '.join(case)}: the configuration is not JSON; write it as '{{\"block\": 4096}}'")
        cases.append((case[0], case[1], case[2] if len(case) == 3 else None, args.libraries or ()))
    if not cases:
        cases = [(o, s, c, tuple(args.libraries or libs)) for o, s, c, libs in DEFAULT_CASES]
    ncu = find_ncu()
    if not torch.cuda.is_available() or ncu is None:
        print("error: this benchmark needs a CUDA GPU and Nsight Compute's ncu on the PATH; run it on such a "
              "machine", file=sys.stderr)
        return 2
    (args.out / "raw").mkdir(parents=True, exist_ok=True)
    results = []
    for name, shape, config, libraries in cases:
        op = operators.get(name)
        for impl in ["template", *libraries]:
            baseline = op.baselines.get(impl)
            why_not = (None if impl == "template" else
                       f"{name} has no baseline {impl!r} (it has {', '.join(op.baselines)})" if baseline is None
                       else baseline.unavailable())
            found = ({"kernels": [], "error": f"not profiled: {why_not}"} if why_not
                     else profile(ncu, name, shape, impl, config if impl == "template" else None,
                                  args.out / "raw" / f"{name}-{shape.replace(',', '-').replace('=', '')}-{impl}.csv"))
            results.append({"operator": name, "shape": shape, "impl": impl,
                            "config": json.loads(config) if config and impl == "template" else None, **found})
            first = found["error"] or f"{len(found['kernels'])} kernel(s), " + ", ".join(
                f"{duration_us(k) or float('nan'):.1f} us" for k in found["kernels"])
            print(f"{name} {shape} {impl}: {first}", flush=True)
    props = torch.cuda.get_device_properties(0)
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:]
    meta = {"gpu": props.name, "torch": torch.__version__, "python": platform.python_version(),
            "ncu": version[0] if version else None,
            "command": "python -m benchmarks.ncu_profile " + shlex.join(argv)}
    (args.out / "ncu_profile.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (args.out / "ncu_profile.md").write_text(markdown(meta, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
