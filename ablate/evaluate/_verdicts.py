"""Timing verdicts, in the judge: what a shape's time (the judge's clock, _shape) is worth.

- The best library of the shape is the fastest baseline that passed the correctness rule, timed
  by the same protocol in a process of the same kind (_library); speedup_vs_best is its time over
  the kernel's.
- Speed of light is physical: the roofline floor is the fewest bytes the operator must move
  over the memory ceiling, or its flops over the compute ceiling, whichever is larger, where a
  ceiling is the higher of the datasheet peak and the best measured rate. Of the bytes, the
  outputs' writes may still sit in L2 when a batch ends, so up to L2's size of them is not
  counted (each call's inputs are fresh and were written before the batch, far more than L2
  holds). sol_fraction = floor / time. A time below the floor by more than the noise margin is
  rejected (below_roofline); within it, sol_fraction is reported as 1.0 and the row says so.
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

from ablate.operators._baselines import NOT_LOADED

NOISE = 0.02  # timing noise tolerated against the floor
FLAG_SPEEDUP = 3.0


def floor_ms(op, shape: dict, ceilings: dict, l2_bytes: int | None, written: int | None = None) -> float:
    """The physical minimum time of the operator on this shape, in ms. written: the bytes of its
    outputs (None: unknown, and then every byte is taken as one L2 could hold back)."""
    total = op.bytes(shape)
    written = total if written is None else min(max(0, written), total)
    moved = total - written + max(0, written - (l2_bytes or 0))
    return max(moved / (ceilings["copy_gbps"] * 1e9), op.flops(shape) / (ceilings["matmul_tflops"] * 1e12)) * 1e3


def judge_time(row: dict, shape: dict, timing, fails: dict, ran: set, *, op, device: str, ceilings: dict | None,
               l2_bytes: int | None = None, written: int | None = None, contention: str | None = None) -> None:
    try:
        t = {k: float(timing[k]) for k in ("median", "p10", "p90")}
        n, wall = int(timing["n"]), float(timing["wall_ms"])
        assert all(math.isfinite(v) and v >= 0 for v in (*t.values(), wall)) and n > 0
    except (KeyError, TypeError, ValueError, AssertionError):
        fails.setdefault("driver_tampered", f"malformed timing report: {timing!r:.200}")
        return
    # the rest of the judge's own report as it is (batches, voided, calls_per_batch, protocol_ms,
    # copy_in_us...): a list kept here dropped copy_in_us when time_gpu began to report it
    row["time_ms"] = {**t, "n": n, **{k: v for k, v in timing.items() if k not in (*t, "n", "wall_ms")}}
    row["wall_ms"] = wall
    med = t["median"]
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
