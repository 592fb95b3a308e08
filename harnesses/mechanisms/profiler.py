"""A `profile` tool: where kernel.py's time goes on one public shape, as a profile, a diagnosis
and recommendations ranked by expected benefit.

With a GPU and Nsight Compute (`ncu`) usable inside the sandbox, the profile is ncu's metrics
(sections SpeedOfLight, MemoryWorkloadAnalysis, ComputeWorkloadAnalysis, Occupancy, LaunchStats,
WarpStateStats; report and CSV kept under profile/ in the workspace). Otherwise (no GPU, no ncu
in the sandbox, or no permission to read the performance counters, as for a non-root uid by the
driver's default) it falls back to timed variants: the kernel on every public shape, the
reference, and the machine's own copy and matmul ceilings; the report says why.
"""
from __future__ import annotations

import csv
import glob
import io
import json
import re
import shlex
import shutil
from dataclasses import dataclass, field
from typing import Any

from ablate.models import ToolSpec
from ablate.sandbox import Tool, ToolResult
from ablate.harnesses import _documents
from ablate.harnesses.mechanisms._base import Mechanism

SCRIPT = "scripts/profile.py"
SECTIONS = ["SpeedOfLight", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "Occupancy", "LaunchStats",
            "WarpStateStats"]
NCU_PLACES = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
# ncu's raw metric names -> the profile's names. Units are converted from ncu's units row.
METRICS = {
    "gpu__time_duration.sum": "duration_us",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "dram__bytes.sum.per_second": "dram_gbs",
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__block_size": "block_size",
    "launch__grid_size": "grid_size",
    "launch__waves_per_multiprocessor": "waves_per_sm",
    "launch__occupancy_limit_registers": "occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem": "occupancy_limit_shared_mem",
}
# Collected beside the sections: the SpeedOfLight section reports DRAM only inside its "Memory
# Throughput" (the busiest of DRAM, L1 and L2), which hides which one binds.
EXTRA_METRICS = ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum", "dram__bytes_write.sum")
TENSOR = re.compile(r"^sm__pipe_tensor.*cycles_active.*pct_of_peak")
STALL = re.compile(r"^smsp__average_warps?_(?:issue_stalled|latency_issue_stalled)_(\w+?)_per_issue_active\.ratio$")
SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6,  # -> microseconds
         "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
         "byte/second": 1e-9, "kbyte/second": 1e-6, "mbyte/second": 1e-3, "gbyte/second": 1.0, "tbyte/second": 1e3}
STALL_ADVICE = {
    "long_scoreboard": ("warps wait on global memory", "keep more loads in flight: larger tiles per program, "
                        "software pipelining (num_stages), vectorised 16-byte accesses"),
    "lg_throttle": ("the load/store queue is full", "fewer, wider memory instructions (vectorise; load whole rows)"),
    "barrier": ("warps wait at barriers", "fewer block-wide synchronisations; fewer warps per reduction"),
    "mio_throttle": ("shared-memory / special-function queue is full", "fewer shared-memory round trips; "
                     "swizzle to avoid bank conflicts"),
    "short_scoreboard": ("warps wait on shared memory or MUFU results", "reduce shared-memory traffic; exp2 instead of exp"),
    "math_pipe_throttle": ("an arithmetic pipe is saturated", "move work to tensor cores or cheaper instructions"),
    "wait": ("fixed-latency dependencies", "more independent work per thread (unroll, more rows per program)"),
    "not_selected": ("warps are ready but not picked: the scheduler is busy", "little to gain from more occupancy"),
    "membar": ("memory barriers", "avoid fences and atomics in the hot loop"),
    "drain": ("warps wait for stores to drain at exit", "fewer, wider stores"),
    "imc_miss": ("constant-cache misses", "pass per-launch constants as constexpr or kernel arguments"),
    "no_instruction": ("instruction-cache misses or branch targets", "less code per kernel (fewer unrolled variants)"),
}


@dataclass
class ProfilerOptions:
    reps: int = 20  # timed calls per measurement in the timed fallback
    ncu: bool = True  # try Nsight Compute first
    ncu_sections: list[str] = field(default_factory=lambda: list(SECTIONS))


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_PLACES:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """ncu's raw page (--csv --page raw): a header row, a units row, one row per profiled kernel."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if start is None or len(rows) < start + 3:
        return []
    header, units, data = rows[start], rows[start + 1], rows[start + 2:]
    kernels = []
    for row in data:
        raw = dict(zip(header, row))
        unit = dict(zip(header, units))
        k: dict[str, Any] = {"kernel": raw.get("Kernel Name", "?")}
        stalls, tensor = {}, []
        for name, value in raw.items():
            number = _number(value, unit.get(name, ""))
            if name in METRICS and number is not None:
                k[METRICS[name]] = number
            elif TENSOR.match(name) and number is not None:
                tensor.append(number)
            elif (m := STALL.match(name)) and number is not None:
                stalls[m.group(1)] = number
        if tensor:
            k["tensor_pipe_pct"] = max(tensor)
        if stalls:
            total = sum(stalls.values()) or 1.0
            k["top_stalls"] = [{"reason": r, "cycles_per_issue": round(v, 2), "share": round(v / total, 3)}
                               for r, v in sorted(stalls.items(), key=lambda kv: -kv[1])[:4]]
        kernels.append(k)
    return kernels


def _number(value: str, unit: str) -> float | None:
    try:
        x = float(value.replace(",", ""))
    except (AttributeError, ValueError):
        return None
    return round(x * SCALE.get(_unit(unit), 1.0), 4)


def _unit(unit: str) -> str:
    """ncu spells units long or short by version ("usecond"/"us", "Gbyte/second"/"Gbyte/s")."""
    u = unit.strip().lower()
    u = {"ns": "nsecond", "us": "usecond", "ms": "msecond", "s": "second"}.get(u, u)
    return u[:-2] + "/second" if u.endswith("/s") else u


def diagnose_ncu(kernels: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """Diagnosis and ranked recommendations from ncu metrics, for the kernel that took longest."""
    if not kernels:
        return ["ncu profiled no kernel launch: kernel() launched nothing on the GPU"], []
    k = max(kernels, key=lambda x: x.get("duration_us", 0.0))
    diag, recs = [f"{len(kernels)} kernel launch(es); the longest is {k['kernel']} at {k.get('duration_us', '?')} us"], []
    dram, memory = _memory_figure(k)
    sm = k.get("sm_throughput_pct", 0.0)
    occ, theo = k.get("achieved_occupancy_pct"), k.get("theoretical_occupancy_pct")
    if memory is None:
        diag.append("ncu reported no memory throughput for this kernel; the verdict below reads compute alone")
        dram, memory = 0.0, "memory (not reported)"
    if dram >= 70:
        diag.append(f"memory-bound near the ceiling: {memory} at {dram:.0f}% of peak")
        recs.append(_rec("stop tuning the memory path, or move fewer bytes (fuse neighbouring work)", "low", 100 / max(dram, 1)))
    elif sm >= 70:
        diag.append(f"compute-bound: SM throughput {sm:.0f}% of peak, {memory} {dram:.0f}%")
        tensor = k.get("tensor_pipe_pct")
        if tensor is not None and tensor < 50:
            recs.append(_rec(f"tensor pipes only {tensor:.0f}% busy: use tensor-core MMA (tl.dot / wgmma) with larger tiles",
                             "high", 100 / max(tensor, 10)))
        recs.append(_rec("cut instructions per element (exp2, fewer conversions, hoist invariants)", "medium", 1.2))
    else:
        diag.append(f"latency-bound: neither {memory} ({dram:.0f}%) nor compute ({sm:.0f}%) is near its peak")
        gain = 70 / max(dram, sm, 1)
        if k.get("waves_per_sm") is not None and k["waves_per_sm"] < 1:
            recs.append(_rec(f"only {k['waves_per_sm']:.2f} waves: too few programs for the SMs; split the work finer",
                             "high", gain))
        if occ is not None and theo is not None and occ < 0.6 * theo:
            recs.append(_rec(f"achieved occupancy {occ:.0f}% vs {theo:.0f}% possible: imbalance or a tail; "
                             "more, smaller programs", "medium", gain * 0.7))
        elif theo is not None and theo < 50:
            limit = "registers" if k.get("occupancy_limit_registers", 99) <= k.get("occupancy_limit_shared_mem", 99) else "shared memory"
            recs.append(_rec(f"theoretical occupancy {theo:.0f}%, limited by {limit}: smaller tiles or fewer "
                             f"registers ({k.get('registers_per_thread', '?')} per thread)", "medium", gain * 0.6))
    for s in k.get("top_stalls", [])[:2]:
        what, fix = STALL_ADVICE.get(s["reason"], (s["reason"].replace("_", " "), "see the profiling page of the wiki"))
        diag.append(f"top stall: {s['reason']} ({s['share'] * 100:.0f}% of stall cycles): {what}")
        if s["share"] >= 0.25 and s["reason"] != "not_selected":
            recs.append(_rec(fix, "medium", 1.0 + s["share"]))
    return diag, _ranked(recs)


def _memory_figure(k: dict[str, Any]) -> tuple[float | None, str | None]:
    """(percent of peak, what it measures): DRAM's own throughput when ncu gave it, else the
    busiest memory unit's (the SpeedOfLight section's "Memory Throughput"); never a silent 0."""
    if k.get("dram_throughput_pct") is not None:
        return k["dram_throughput_pct"], "DRAM"
    if k.get("memory_throughput_pct") is not None:
        return k["memory_throughput_pct"], "memory (the busiest of DRAM, L1, L2)"
    return None, None


def diagnose_timed(r: dict[str, Any], roofline: dict[str, int] | None) -> tuple[list[str], list[dict[str, Any]]]:
    """Diagnosis from timings: achieved rate against the machine's own ceilings."""
    ms = r["kernel_ms"]
    nbytes = (roofline or {}).get("bytes") or r.get("bytes_touched") or 0
    flops = (roofline or {}).get("flops") or 0
    gbs = nbytes / (ms * 1e-3) / 1e9 if ms else 0.0
    bw = gbs / r["copy_gbs"] if r.get("copy_gbs") else 0.0
    diag = [f"kernel {ms:.4g} ms vs reference {r['reference_ms']:.4g} ms ({r['reference_ms'] / ms:.2f}x)",
            f"achieved {gbs:.0f} GB/s = {bw * 100:.0f}% of this machine's measured copy rate ({r.get('copy_gbs', 0):.0f} GB/s)"]
    recs = []
    tf = flops / (ms * 1e-3) / 1e12 if flops and ms else 0.0
    compute = r.get("matmul_tflops") and flops and tf / r["matmul_tflops"] > bw
    if compute:
        frac = tf / r["matmul_tflops"]
        diag.append(f"compute: {tf:.1f} TFLOP/s = {frac * 100:.0f}% of the measured bf16 matmul rate")
        if frac < 0.6:
            recs.append(_rec("use tensor cores with larger tiles and more pipeline stages", "high", 0.7 / max(frac, 0.05)))
    elif r.get("device", "").startswith("cpu"):
        diag.append("timings come from Triton's CPU interpreter: they rank configurations only roughly")
    if ms < 0.015 and not r.get("device", "").startswith("cpu"):
        diag.append("launch-bound: under ~15 us, launch overhead dominates")
        recs.append(_rec("one launch per call: fuse kernels, no host-side work or allocations in kernel()", "high", 2.0))
    if not compute:
        if bw < 0.6:
            recs.append(_rec("far below the copy rate: move more bytes per program (several rows per program, "
                             "wider blocks), vectorised loads, and check occupancy", "high", 0.9 / max(bw, 0.05)))
        elif bw < 0.85:
            recs.append(_rec("tune num_warps and rows per program; check for a second pass over the input", "medium",
                             0.9 / bw))
        else:
            recs.append(_rec("near the copy ceiling: further gains need fewer bytes moved", "low", 1.0 / max(bw, 0.5)))
    times = [s["kernel_ms"] for s in r.get("by_shape", []) if s.get("kernel_ms")]
    if len(times) > 1 and max(times) / min(times) < 1.5:
        diag.append("time barely changes across shapes: a fixed cost (launch, host work) dominates")
    if r["reference_ms"] < ms:
        recs.append(_rec("slower than the PyTorch reference: the design is off, not the tuning", "high", r["reference_ms"] and ms / r["reference_ms"]))
    return diag, _ranked(recs)


def _rec(action: str, benefit: str, expected_speedup: float) -> dict[str, Any]:
    return {"action": action, "expected_benefit": benefit,
            "expected_speedup_bound": round(min(float(expected_speedup), 20.0), 2)}


def _ranked(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    order = {"high": 0, "medium": 1, "low": 2}
    recs = sorted(recs, key=lambda r: (order[r["expected_benefit"]], -r["expected_speedup_bound"]))
    return [dict(r, rank=i + 1) for i, r in enumerate(recs)]


class Profiler(Mechanism):
    name = "profiler"
    Options = ProfilerOptions
    prompt = "prompts/profiler.md"
    documents = (SCRIPT,)

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.profiles: list[dict[str, Any]] = []

    def tools(self, task, ws, model):
        opts = self.options

        def profile(args):
            index = int(args.get("shape") or 0)
            if not 0 <= index < len(task.public_shapes):
                return ToolResult(f"profile: shape must be 0..{len(task.public_shapes) - 1} (an index into shapes.json)",
                                  is_error=True)
            if not ws.resolve("kernel.py").is_file():
                return ToolResult("profile: write kernel.py first", is_error=True)
            n = len(self.profiles) + 1
            report, seconds, gpu_s = {"shape": task.public_shapes[index]}, 0.0, 0.0
            reason = "no GPU: Nsight Compute needs one" if not task.gpu else ("ncu disabled (profiler.ncu=false)" if not opts.ncu else None)
            if reason is None:
                kernels, reason, s, g, files = self._ncu(ws, index, n)
                seconds, gpu_s = seconds + s, gpu_s + g
                if kernels:
                    diag, recs = diagnose_ncu(kernels)
                    report.update(source="ncu", profile=kernels, diagnosis=diag, recommendations=recs, files=files)
            if "source" not in report:
                r = ws.run(f"python -c {shlex.quote(_documents.text(SCRIPT))} timed {index} {opts.reps}")
                seconds, gpu_s = seconds + r.seconds, gpu_s + r.gpu_seconds
                line = next((ln for ln in reversed(r.output.splitlines()) if ln.startswith("PROFILE ")), None)
                if line is None:
                    self.profiles.append({"shape": report["shape"], "source": "failed", "ncu_unavailable": reason})
                    return ToolResult(f"profile: kernel.py failed to run:\n{r.output[-3000:]}", is_error=True,
                                      seconds=seconds, gpu_seconds=gpu_s)
                timed = json.loads(line.removeprefix("PROFILE "))
                roof = task.roofline[index] if index < len(task.roofline) else None
                diag, recs = diagnose_timed(timed, roof)
                report.update(source="timed", ncu_unavailable=reason, profile=timed, diagnosis=diag, recommendations=recs)
            self.profiles.append(report)
            return ToolResult(json.dumps(report, indent=1), seconds=seconds, gpu_seconds=gpu_s)

        spec = ToolSpec("profile", "Profile kernel.py on one public shape (index into shapes.json, default 0): "
                        "profile, diagnosis, ranked recommendations.",
                        {"type": "object", "properties": {"shape": {"type": "integer"}}, "required": []})
        return {"profile": Tool(spec, profile)}

    def _ncu(self, ws, index: int, n: int):
        """(kernels, reason they are missing, seconds, gpu seconds, files)."""
        ncu = find_ncu()
        if ncu is None:
            return [], "ncu not found (not on PATH, nor in /usr/local/cuda*/bin or /opt/nvidia/nsight-compute)", 0.0, 0.0, []
        stem = f"profile/p{n}"
        script = shlex.quote(_documents.text(SCRIPT))
        sections = " ".join(f"--section {shlex.quote(s)}" for s in self.options.ncu_sections)
        sections += " --metrics " + ",".join(EXTRA_METRICS)
        q = shlex.quote(ncu)
        command = (f"mkdir -p profile && test -x {q} || {{ echo 'NCU-NOT-VISIBLE'; exit 3; }}; "
                   f"{q} --profile-from-start off --target-processes all {sections} -f -o {stem} "
                   f"python -c {script} ncu {index} 1 > {stem}.log 2>&1; code=$?; cat {stem}.log; "
                   f"[ $code -eq 0 ] && {q} --import {stem}.ncu-rep --csv --page raw > {stem}.csv; exit $code")
        r = ws.run(command)
        out = r.output
        if "NCU-NOT-VISIBLE" in out:
            return [], f"ncu at {ncu} is not visible inside the sandbox", r.seconds, r.gpu_seconds, []
        if "ERR_NVGPUCTRPERM" in out:
            return [], ("ncu has no permission to read the GPU performance counters inside the sandbox "
                        "(ERR_NVGPUCTRPERM: the driver restricts them to admin users; the agent runs as an "
                        "unprivileged uid)"), r.seconds, r.gpu_seconds, [f"{stem}.log"]
        try:
            text = ws.read_bytes(f"{stem}.csv", max_bytes=8 << 20).decode(errors="replace")
        except OSError:
            last = [ln for ln in out.splitlines() if "==ERROR==" in ln or "==WARNING==" in ln][-1:] or out.strip().splitlines()[-1:] or ["no output"]
            return [], f"ncu failed (exit code {r.exit_code}): {last[0][:300]}", r.seconds, r.gpu_seconds, [f"{stem}.log"]
        kernels = parse_ncu_csv(text)
        if not kernels:
            return [], "ncu ran but profiled no kernel launch", r.seconds, r.gpu_seconds, [f"{stem}.log", f"{stem}.csv"]
        return kernels, None, r.seconds, r.gpu_seconds, [f"{stem}.ncu-rep", f"{stem}.csv", f"{stem}.log"]

    def use(self):
        return {"profiles": len(self.profiles),
                "sources": [p.get("source") for p in self.profiles],
                "ncu_unavailable": sorted({p["ncu_unavailable"] for p in self.profiles if p.get("ncu_unavailable")}),
                "reports": [{k: p.get(k) for k in ("shape", "source", "ncu_unavailable", "diagnosis", "recommendations", "files")}
                            for p in self.profiles]}
