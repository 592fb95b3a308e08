"""A second clock for the candidate's timed calls: the device's own activity records.

CUDA events are read by the candidate's driver; a submission with native code (a C++ extension,
CuPy's raw pointers) could rewrite what the driver reads. CUPTI, through the profiler torch
ships (Kineto), records when each kernel, copy and fill actually ran on the device. A block of
calls after the timed ones runs under it (see _timing: not the timed calls themselves, whose host
overhead the profiler would raise), and the block's median device time (how long the device ran
any of a call's kernels, copies and fills: gaps left out, since the profiler's host overhead
widens them) is set beside the timed calls' median event time: the two must agree. An honest
call's work lies between its two events, so its device time is never longer than its event time;
a device time longer than the events by more than the clocks' noise is taken as the call's time,
and one far longer means the events lied (the judge rejects: `timing_disagrees`; _verdicts). Measured
on an H200: an eager torch RMSNorm's span (first start to last end) under the profiler was 2.1%
longer than its timed calls' events, and KernelBench 36_RMSNorm_'s eager torch 2.1% (11.634 ms
against 11.397). A kernel that
works less when it sees the profiler is
caught by the block's checked calls, drawn as in the timed loop.

Which activities are the call's: the driver wraps its own work before each call (refill, perturb,
L2 flush) in a profiler range named with a fresh nonce, and its work after a kept call (copying
the outputs out) in another; the device activities launched inside those ranges are the driver's,
and everything else the device ran between the driver's work before call i and that before call
i+1 is call i's. A submission that ends, restarts or floods the trace leaves a
trace with the wrong number of ranges, which the judge also rejects.

Everything called is captured when this module is built (before any submission is imported): the
C-level profiler entry points and a profiler configuration made by torch's own code.
"""
from __future__ import annotations

import bisect
import os

_urandom = os.urandom


class DeviceTrace:
    """CUPTI activity tracing around the timed loop. `available` is False where this torch or
    machine cannot trace the device (then the result says so: the loop ran on events alone)."""

    def __init__(self):
        self.available, self.why, self.name = False, None, None
        try:
            import torch
            from torch._C import _autograd as A
            from torch.autograd import profiler as P

            kinds = A._supported_activities()
            if P.ProfilerActivity.CUDA not in kinds:
                self.why = "this torch's profiler cannot record CUDA activity"
                return
            prof = P.profile(use_device="cuda", use_kineto=True, record_shapes=False)
            try:
                config = prof.config(create_trace_id=False)
            except TypeError:  # older torch: no trace ids
                config = prof.config()
            self._config, self._activities = config, set(prof.kineto_activities)
            self._prepare, self._enable, self._disable = A._prepare_profiler, A._enable_profiler, A._disable_profiler
            self._enter, self._exit = A._record_function_with_args_enter, A._record_function_with_args_exit
            self._cpu = A.DeviceType.CPU
            self._sync = torch._C._cuda_synchronize
            self.available = True
        except Exception as e:  # noqa: BLE001  (any failure here only means: no second clock)
            self.why = f"the profiler could not be set up: {type(e).__name__}: {e}"

    def start(self) -> None:
        self.name = "ablate.driver." + _urandom(8).hex()
        try:
            self._prepare(self._config, self._activities)
        except TypeError:
            self._prepare(self._config, self._activities, set())
        self._enable(self._config, self._activities)

    def enter(self, aside: bool = False):
        """A driver range: before a call (a boundary between calls), or aside (work between)."""
        return self._enter(self.name + ".aside" if aside else self.name)

    def exit(self, handle) -> None:
        self._exit(handle)

    def stop(self) -> list[tuple] | str:
        """The trace as plain records, or why there is none (a submission ended it, say)."""
        self._sync()
        try:
            return records(self._disable().events(), self.name, self._cpu)
        except Exception as e:  # noqa: BLE001
            return f"the trace could not be read back: {type(e).__name__}: {e}"


def records(events, name: str, cpu) -> list[tuple]:
    """Kineto events as (kind, start_ns, end_ns, correlation): kind "range" for the driver's
    ranges before calls, "aside" for its other ranges, "launch" for CUDA API calls (their
    correlation ids are the device activities'; an operator's own id is another counter, which
    collides with them), "device" for what ran on the device, and "op" for an ATen operator
    dispatched outside the driver's ranges (its name in place of the correlation)."""
    out = []
    for e in events:
        if e.device_type() == cpu:
            if e.name() == name:
                out.append(("range", e.start_ns(), e.end_ns(), 0))
            elif e.name() == name + ".aside":
                out.append(("aside", e.start_ns(), e.end_ns(), 0))
            elif e.name().startswith("cu") and e.correlation_id():  # a CUDA runtime or driver call: operators
                out.append(("launch", e.start_ns(), e.end_ns(), e.correlation_id()))  # number theirs apart
            elif e.name().startswith("aten::"):
                out.append(("op", e.start_ns(), e.end_ns(), e.name()))
        elif not e.name().startswith(name) and not e.is_user_annotation():  # a range's shadow on the device is no work
            corr = e.correlation_id() or e.linked_correlation_id()
            out.append(("device", e.start_ns(), e.end_ns(), corr))
    return out


def call_spans(recs: list[tuple], n: int) -> list[float] | str:
    """The device time (ms) of each of n calls, or why the trace cannot give them."""
    ranges = sorted((s, e) for kind, s, e, _ in recs if kind == "range")
    if len(ranges) != n:
        return f"the trace holds {len(ranges)} driver ranges for {n} timed calls"
    asides = sorted((s, e) for kind, s, e, _ in recs if kind == "aside")
    owner: dict[int, int] = {}  # correlation of a launch made inside a driver range -> its call (-1: aside)
    for kind, s, _, corr in recs:
        if kind == "launch":
            if (i := _inside(ranges, s)) is not None:
                owner[corr] = i
            elif _inside(asides, s) is not None:
                owner[corr] = -1
    driver_lo, driver_hi = [None] * n, [None] * n
    theirs = []
    for kind, s, e, corr in recs:
        if kind != "device":
            continue
        i = owner.get(corr) if corr else None
        if i is None:
            theirs.append((s, e))
        elif i >= 0:
            driver_lo[i] = s if driver_lo[i] is None else min(driver_lo[i], s)
            driver_hi[i] = e if driver_hi[i] is None else max(driver_hi[i], e)
    if any(v is None for v in driver_hi):
        return "the trace misses the driver's device work of some calls"
    per_call: list[list[tuple]] = [[] for _ in range(n)]
    for s, e in theirs:  # call i's: what started after the driver's work before call i
        i = bisect.bisect_right(driver_hi, s) - 1
        if i >= 0:  # (before the first call's work: left over from the warm-up)
            per_call[i].append((s, e))
    return [_busy(spans) / 1e6 for spans in per_call]


def _busy(spans: list[tuple]) -> int:
    """How long the device was doing any of these (overlaps counted once, gaps not at all: the
    profiler slows the host, which widens the gaps between a call's kernels but not the kernels)."""
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total, end = total + (e - s), e
        elif e > end:
            total, end = total + (e - end), e
    return total


def kernel_ops(recs: list[tuple], limit: int = 100) -> list[str]:
    """The ATen operators the calls dispatched (not the driver's, inside its ranges), sorted."""
    ranges = sorted((s, e) for kind, s, e, _ in recs if kind in ("range", "aside"))
    names = sorted({name for kind, s, _, name in recs if kind == "op" and _inside(ranges, s) is None})
    return names[:limit]


def _inside(spans: list[tuple], t) -> int | None:
    """The index of the span (sorted, disjoint) holding t, if any."""
    i = bisect.bisect_right(spans, (t, float("inf"))) - 1
    return i if i >= 0 and spans[i][0] <= t <= spans[i][1] else None
