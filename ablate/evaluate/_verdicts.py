"""Timing verdicts, in the judge: what a shape's timing report is worth.

- The best library of the shape is the fastest baseline that passed the correctness rule;
  speedup_vs_best is its time over the kernel's.
- Speed of light is physical: the roofline floor is the fewest bytes the operator must move
  over the memory ceiling, or its flops over the compute ceiling, whichever is larger, where a
  ceiling is the higher of the datasheet peak and the best measured rate. Of the bytes, the
  outputs' writes may still sit in L2 when the end event fires, so up to L2's size of them is
  not counted; the reads are all counted, since L2 is flushed after the inputs are put in place
  and before the start event (_timing). sol_fraction = floor / time.
  A time below the floor by more than the noise margin is rejected (below_roofline); within it,
  sol_fraction is reported as 1.0 and the row says so.
- The device still busy after the timed stream finished means work was left on another stream.
- The device's own record of the calls (CUPTI, see _trace) must agree with the events: the traced
  block's median device span longer than the timed calls' median event time past the noise
  margin is the row's time instead (trace_longer_than_events); past TRACE_LIMIT it means the
  event times were rewritten (timing_disagrees); so does a trace the submission broke. Events
  longer than the device's record past EVENTS_GAP are flagged (events_longer_than_trace), not
  changed: the device idled inside the timed calls (a host launch longer than the spin before
  the start event covers, see _timing, or gaps between the kernel's own launches), which can only
  count against the kernel, yet makes its time a measure of the host. The ATen
  operators the traced calls dispatched are in the trace too: one of the operator's library_ops
  there is a library_passthrough (a kernel calling the library only in calls that are timed, not
  in those checked one by one). A GPU where no
  trace could be taken is said in the row (flag no_device_trace), not hidden.
- A speedup above FLAG_SPEEDUP over the best library is flagged for a human look.
- Another process using the GPU (the judge's canary copy, _gpu.contention) is said in the row:
  after a library's timing (contended_baseline; that time is used once and not cached) or after
  the candidate's (gpu_contended). Neither rejects: a shared GPU slows, it does not forge.
- A library installed but not loaded (its import failed: a missing dependency, a CUDA runtime
  mismatch) is flagged on every row (baseline_not_loaded): the ratio is then against the others
  only, higher than the same kernel's on a machine where it loads, and its versions say nothing.
"""
from __future__ import annotations

import math

from operators._baselines import NOT_LOADED

NOISE = 0.02  # timing noise tolerated against the floor
FLAG_SPEEDUP = 3.0
# the device busy after the timed stream is done, by more than 50 us and a quarter of the event
# time: work was left on another stream (an idle device syncs in a few microseconds)
STREAM_LAG_MS, STREAM_LAG_FRACTION = 0.05, 0.25
# events resolve about half a microsecond; CUPTI's timestamps, nanoseconds
TRACE_SLACK_MS = 0.002
TRACE_LIMIT = 0.10  # a device record longer than the events by more than this: the events were rewritten
# events this much longer than the device's record: the device idled between them (seen on an H200
# before the spin: a 40 us layernorm shape at 0.0726 ms in one run and 0.0390 ms, against a record of
# 0.0374, in the next; with it, 0.0382 against 0.0370)
EVENTS_GAP = 0.25


def floor_ms(op, shape: dict, ceilings: dict, l2_bytes: int | None, written: int | None = None) -> float:
    """The physical minimum time of the operator on this shape, in ms. written: the bytes of its
    outputs (None: unknown, and then every byte is taken as one L2 could hold back)."""
    total = op.bytes(shape)
    written = total if written is None else min(max(0, written), total)
    moved = total - written + max(0, written - (l2_bytes or 0))
    return max(moved / (ceilings["copy_gbps"] * 1e9), op.flops(shape) / (ceilings["matmul_tflops"] * 1e12)) * 1e3


def _against_trace(row: dict, timing: dict, med: float, fails: dict, ran: set, op) -> float:
    """The time a GPU row is judged by: the events' median, or the device's own record of the
    traced calls (CUPTI) where that is longer than the events past the noise margin (flag
    trace_longer_than_events; the events' median kept beside it). An honest call's kernels lie
    between its events, but on an H200 an eager torch RMSNorm's traced calls ran 2.1% longer than
    its timed calls' events (KernelBench 36_RMSNorm_: 11.634 ms against 11.397), beyond NOISE:
    the device's record is then the time, so events shaved by anything within TRACE_LIMIT gain
    nothing, and beyond it they are rejected (timing_disagrees)."""
    trace = timing.get("trace")
    if isinstance(trace, str) and trace.startswith("unavailable"):
        row.setdefault("flags", []).append("no_device_trace")
        row["trace_note"] = trace
        return med
    ran.add("timing_disagrees")
    span = trace.get("median") if isinstance(trace, dict) else None
    if not isinstance(span, (int, float)) or not math.isfinite(span) or span < 0:
        fails.setdefault("timing_disagrees", f"no device trace of the timed calls: {str(trace):.200}")
        return med
    row["trace_ms"] = span
    library = sorted(set(trace.get("ops") or ()) & set(getattr(op, "library_ops", None) or ()))
    if library:  # checked calls are watched too (the candidate's OpWatch); this sees the timed kind
        fails.setdefault("library_passthrough", "in traced timed calls the kernel dispatched " + ", ".join(library[:6]))
    if span > med * (1 + TRACE_LIMIT) + TRACE_SLACK_MS:
        fails.setdefault("timing_disagrees", f"the device ran each timed call for {span:.4f} ms (median, "
                                             f"CUPTI), the events say {med:.4f} ms")
    elif span > med * (1 + NOISE) + TRACE_SLACK_MS:
        row.setdefault("flags", []).append("trace_longer_than_events")
        row["time_ms"] = {**row["time_ms"], "median": span, "events_median": med}
        return span
    elif med > span * (1 + EVENTS_GAP) + TRACE_SLACK_MS:
        row.setdefault("flags", []).append("events_longer_than_trace")
        row["trace_note"] = (f"the events' median {med:.4f} ms is {med / span - 1:.0%} above the device's record "
                             f"{span:.4f} ms: the device idled inside the timed calls")
    return med


def judge_time(row: dict, shape: dict, timing, fails: dict, ran: set, *, op, device: str, ceilings: dict | None,
               l2_bytes: int | None = None, written: int | None = None, contention: str | None = None) -> None:
    try:
        t = {k: float(timing[k]) for k in ("median", "p10", "p90")}
        n, wall = int(timing["n"]), float(timing["wall_ms"])
        assert all(math.isfinite(v) and v >= 0 for v in (*t.values(), wall)) and n > 0
    except (KeyError, TypeError, ValueError, AssertionError):
        fails.setdefault("driver_tampered", f"malformed timing report: {timing!r:.200}")
        return
    row["time_ms"] = {**t, "n": n}
    row["wall_ms"] = wall
    for k in ("launch_ms", "spin_ms"):  # the host's launch time and the spin that covered it (_timing): evidence only
        if isinstance(timing.get(k), (int, float)) and math.isfinite(timing[k]):
            row[k] = float(timing[k])
    med = t["median"] if device != "cuda" else _against_trace(row, timing, t["median"], fails, ran, op)
    if row["baselines_ms"]:
        best = min(row["baselines_ms"], key=row["baselines_ms"].get)
        row["best_baseline"] = best
        row["speedup_vs_best"] = row["baselines_ms"][best] / med if med > 0 else None
        if row["speedup_vs_best"] and row["speedup_vs_best"] > FLAG_SPEEDUP:
            row.setdefault("flags", []).append(f"speedup_over_{FLAG_SPEEDUP:g}x")
        if best in (row.get("baselines_noisy") or ()):  # no two of its timing runs agreed
            row.setdefault("flags", []).append("noisy_best_baseline")
        if row.get("baselines_contended"):  # any of them: a slowed library can hand "best" to another
            row.setdefault("flags", []).append("contended_baseline")
    if any(NOT_LOADED in str(why) for why in (row.get("baselines_skipped") or {}).values()):
        row.setdefault("flags", []).append("baseline_not_loaded")
    if contention:
        row.setdefault("flags", []).append("gpu_contended")
        row["contention"] = contention
    if device != "cuda":
        return
    ran.add("stream_mismatch")
    lag = timing.get("lag_ms")
    events = t["median"]
    if isinstance(lag, (int, float)) and lag > max(STREAM_LAG_MS, STREAM_LAG_FRACTION * events):
        fails.setdefault("stream_mismatch", f"the device stayed busy {lag:.4f} ms after the timed stream finished "
                                            f"(events: {events:.4f} ms; wall-clock with a full sync: {wall:.4f} ms)")
    if ceilings:
        ran.add("below_roofline")
        floor = floor_ms(op, shape, ceilings, l2_bytes, written)
        row["floor_ms"] = floor
        sol = floor / med if med > 0 else math.inf
        if sol > 1 + NOISE:
            fails.setdefault("below_roofline", f"{med:.4f} ms is below the physical floor {floor:.4f} ms "
                                                f"({ceilings['copy_gbps']} GB/s, {ceilings['matmul_tflops']} TFLOP/s)")
        elif sol > 1:
            row.setdefault("flags", []).append("at_speed_of_light_within_noise")
        row["sol_fraction"] = min(sol, 1.0) if math.isfinite(sol) else None
