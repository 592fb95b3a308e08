"""Timing one callable, the same way for a candidate (in its own process) and for the baselines
(in the judge).

Each call: the live inputs are refilled from one of several input sets, then one element of every
floating-point input is overwritten with another of its elements (positions drawn from the OS's
random source), then L2 is flushed with a buffer larger than it; CUDA events bracket the call
alone. No two calls see the same input, so an answer kept from an earlier call, keyed on
pointers or on a fingerprint of the values, is wrong for this one. After each call the loop draws,
from the OS's random source, whether to keep it: a kept call's outputs are handed to `keep`
(which, in the candidate, seals them and sends them to the judge) before the kernel runs again, so
the kernel cannot know which calls are checked, nor fix a call's outputs once it has returned.

Between the flush and the start event a spin kernel holds the device for about twice the host's
time to launch one call (measured in the warm-up; at most SPIN_MAX_MS), so the launch is queued
before the device reaches the start event: the events bracket the call's device work, not the
host's launch path, whatever else loads the host (as nvbench's blocking kernel does). Work that
depends on the inputs cannot hide in the spin: the inputs are the device's, and waiting for them
waits past the start event. The host's cost stays in the row as wall_ms, timed with a full sync.

Persisting L2 (a reserved set-aside or an access-policy window) is checked after every call and
reset when found. Warm-up calls are excluded; the number of calls adapts so the timed calls add
up to about `budget_ms`. A few more calls measure the wall clock and the lag between the timed
stream finishing and the whole device going idle (work left on a side stream shows up there).

On a GPU, after the timed calls, a block of further calls (shaped and checked like them) can run
under a device trace (_trace): the device's own record of each call's span, reported beside the
event times for the judge to compare. Only that block is traced: CUPTI slows the host's launch
calls, which would leak into the event times of kernels whose launch path is heavy (measured on
an H200: a CuPy kernel's events read 1.6x do_bench under a trace).

CPU (Triton's interpreter): a handful of calls timed by perf_counter; labelled, never mixed with GPU.

Everything the loop calls is captured here at import as C-level callables, before any
submission is imported; the candidate loads this module privately (see _candidate), so a
submission can neither patch it nor reach the torch or os attributes it captured.
"""
from __future__ import annotations

import math
import os
import time

import torch

from ablate.evaluate import _trace

_perf = time.perf_counter
_urandom = os.urandom
_from_bytes = int.from_bytes
_TB = torch._C.TensorBase
_Tensor = torch.Tensor
_copy, _clone, _zero, _reshape = _TB.copy_, _TB.clone, _TB.zero_, _TB.reshape
_numel, _is_float, _is_contig = _TB.numel, _TB.is_floating_point, _TB.is_contiguous
_getitem = _TB.__getitem__
_Event = torch._C._CudaEventBase
_record, _elapsed, _esync = (getattr(_Event, n, None) for n in ("record", "elapsed_time", "synchronize"))
_sync = getattr(torch._C, "_cuda_synchronize", None)
_spin = getattr(torch._C, "_cuda_sleep", None)  # a kernel that spins for a number of clock cycles
KEEP_PER_SHAPE = 4  # calls kept for checking, on average
MIN_KEPT = 2
TRACED_CALLS = 40
# the spin before each start event: SPIN_FACTOR times the host's median launch time in the warm-up,
# within these bounds (ms); the warm-up's own calls spin SPIN_WARM_CYCLES
SPIN_FACTOR, SPIN_MIN_MS, SPIN_MAX_MS = 2.0, 0.02, 1.0
SPIN_WARM_CYCLES = 100_000


def _rand_below(n: int) -> int:
    return _from_bytes(_urandom(8), "little") % n


def refresh(live: tuple, source: tuple) -> None:
    for a, b in zip(live, source):
        if isinstance(a, _Tensor):
            _copy(a, b)


def perturb(live: tuple) -> list:
    """Overwrite one element of each floating-point input with another of its elements; returns
    [(input index, destination, source)] (flat indices), what the judge needs to redo the input."""
    done = []
    for i, t in enumerate(live):
        if isinstance(t, _Tensor) and _is_float(t) and _is_contig(t):
            n = _numel(t)
            if n > 1:
                dst, src = _rand_below(n), _rand_below(n)
                flat = _reshape(t, (-1,))
                _copy(_getitem(flat, slice(dst, dst + 1)), _getitem(flat, slice(src, src + 1)))
                done.append((i, dst, src))
    return done


def apply_perturbation(inputs: tuple, moves) -> tuple:
    """The same overwrite on a copy of `inputs` (the judge rebuilding a kept call's input)."""
    out = list(inputs)
    for i, dst, src in moves:
        t = out[i]
        if not (isinstance(t, _Tensor) and _is_float(t) and 0 <= dst < _numel(t) and 0 <= src < _numel(t)):
            raise ValueError(f"perturbation {(i, dst, src)} does not fit the inputs")
        t = _clone(t)
        flat = _reshape(t, (-1,))
        _copy(_getitem(flat, slice(dst, dst + 1)), _getitem(flat, slice(src, src + 1)))
        out[i] = t
    return tuple(out)


def _outs(out) -> list:
    return [out] if type(out) is _Tensor else list(out)


def _keep_now(n: int) -> bool:
    return _rand_below(1 << 30) < (1 << 30) * min(1.0, KEEP_PER_SHAPE / max(n, 1))


def stats(times: list[float]) -> dict:
    s = sorted(times)
    q = lambda p: s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]  # noqa: E731
    mid = len(s) // 2
    median = s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2
    return {"median": median, "p10": q(0.1), "p90": q(0.9), "n": len(s)}


def measure(fn, live: tuple, sources: list[tuple], *, device: str, budget_ms: float | None = None,
            graph: bool = False, l2=None, est_ms: float | None = None, keep=None, stream=None,
            flush=None, trace=None) -> dict:
    """Time fn(*live). Returns stats with wall_ms (and, on a GPU, lag_ms and l2_persistence).
    keep(call, set, moves, outputs): called for the calls drawn for checking (at least MIN_KEPT),
    right after each returns. On CPU, est_ms (the time of earlier, already warm calls) replaces
    the warm-up call. stream, flush: the timing stream and L2-flush buffer (captured by the caller
    before any submitted code ran). trace: a _trace.DeviceTrace to run the traced block under; the
    result's "trace" is then that block's device spans (stats, with its own event median as
    "events_median") or why there are none (a string)."""
    if device == "cpu":
        return _cpu(fn, live, sources, 30.0 if budget_ms is None else budget_ms, est_ms, keep)
    return _gpu(fn, live, sources, 100.0 if budget_ms is None else budget_ms, graph, l2, keep, stream, flush, trace)


def _order(n: int, k: int) -> list[int]:
    """Which input set each call uses: every set equally often, in an order drawn fresh."""
    order = [i % k for i in range(n)]
    for i in range(n - 1, 0, -1):
        j = _rand_below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def _cpu(fn, live, sources, budget_ms, est, keep, min_calls=3, max_calls=10):
    k = len(sources)
    if est is None:
        refresh(live, sources[0])
        t0 = _perf()
        fn(*live)  # warm-up, excluded
        est = (_perf() - t0) * 1e3
    n = min(max_calls, max(min_calls, k, math.ceil(budget_ms / max(est, 1e-3))))
    times, kept, i = [], 0, 0
    for i, j in enumerate(_order(n, k)):
        refresh(live, sources[j])
        moves = perturb(live)
        t0 = _perf()
        out = fn(*live)
        times.append((_perf() - t0) * 1e3)
        if keep is not None and _keep_now(n):
            keep(i, j, moves, _outs(out))
            kept += 1
    while keep is not None and kept < MIN_KEPT:  # more calls, shaped like the timed ones, until enough are kept
        i += 1
        j = _rand_below(k)
        refresh(live, sources[j])
        moves = perturb(live)
        keep(i, j, moves, _outs(fn(*live)))
        kept += 1
    result = stats(times)
    result["wall_ms"] = result["median"]
    return result


def capture(fn, live):
    """A CUDA graph of one call; returns a callable replaying it and returning its outputs."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*live)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static = fn(*live)

    def replay():
        g.replay()
        return static

    return replay


def _gpu(fn, live, sources, budget_ms, graph, l2, keep, stream, flush, trace,
         min_calls=20, max_calls=2000, max_wall_s=5.0):
    k = len(sources)
    if stream is None:
        stream = torch.cuda.current_stream()
    if flush is None:
        from ablate.evaluate._gpu import flush_buffer

        flush = flush_buffer()
    call = capture(fn, live) if graph else (lambda: fn(*live))
    used_l2 = False
    traced = False
    spin_cycles = SPIN_WARM_CYCLES if _spin is not None and SPIN_MAX_MS > 0 else 0  # sized after the warm-up

    def one(j, start, end, launches=None):
        """One call between its events; launches: where the host's launch time (ms) goes, if anywhere."""
        nonlocal used_l2
        mark = trace.enter() if traced else None
        refresh(live, sources[j])
        moves = perturb(live)
        _zero(flush)
        if spin_cycles:
            _spin(spin_cycles)
        if mark is not None:
            trace.exit(mark)
        _record(start, stream)
        if launches is None:
            out = call()
        else:
            t = _perf()
            out = call()
            launches.append((_perf() - t) * 1e3)
        _record(end, stream)
        if l2 is not None and l2.used():  # cheap queries; the reset (maybe a sync) only when needed
            used_l2 = True
            l2.reset()
        return out, moves

    if l2 is not None:
        l2.reset()

    # warm-up: at least 3 calls and 25 ms; its event times estimate the per-call cost
    warm, launches, t0 = [], [], _perf()
    while len(warm) < 3 or (_perf() - t0) < 0.025 and len(warm) < 100:
        s, e = _Event(enable_timing=True), _Event(enable_timing=True)
        one(len(warm) % k, s, e, launches)
        _sync()
        warm.append(_elapsed(s, e))
    est = sorted(warm)[len(warm) // 2]
    launch_ms = sorted(launches)[len(launches) // 2]
    spin_cycles, spin_ms = _size_spin(launch_ms, stream) if spin_cycles else (0, 0.0)
    flush_ms = 256 / 3000  # ~256 MB at ~3 TB/s, for the wall-time cap only
    n = math.ceil(budget_ms / max(est, 1e-3))
    n = min(max_calls, max(min_calls, k, n),
            max(min_calls, k, int(max_wall_s * 1e3 / (est + flush_ms + spin_ms + 0.02))))
    starts = [_Event(enable_timing=True) for _ in range(n)]
    ends = [_Event(enable_timing=True) for _ in range(n)]

    def block(first, count, starts, ends):
        """count calls from call number first; returns how many were kept."""
        got = 0
        for c, j in enumerate(_order(count, k)):
            out, moves = one(j, starts[c], ends[c])
            if keep is not None and _keep_now(count):
                _esync(ends[c])  # the call is done; its outputs leave before the kernel runs again
                mark = trace.enter(aside=True) if traced else None
                keep(first + c, j, moves, _outs(out))
                if mark is not None:
                    trace.exit(mark)
                got += 1
        _sync()
        return got

    def top_up(i, got):
        """More calls, shaped like the timed ones and each kept, until got reaches MIN_KEPT."""
        while keep is not None and got < MIN_KEPT:
            i += 1
            s, e = _Event(enable_timing=True), _Event(enable_timing=True)
            j = _rand_below(k)
            out, moves = one(j, s, e)
            _esync(e)
            keep(i, j, moves, _outs(out))
            got += 1
        return i, got

    kept = block(0, n, starts, ends)
    i = n - 1
    result = stats([_elapsed(s, e) for s, e in zip(starts, ends)])
    if trace is not None and trace.available:
        # the traced block: as many calls as make a steady median, each as likely to be checked as a
        # timed one, so a kernel that behaves differently under the profiler is checked there too
        nt = min(n, TRACED_CALLS)
        tstarts = [_Event(enable_timing=True) for _ in range(nt)]
        tends = [_Event(enable_timing=True) for _ in range(nt)]
        trace.start()
        traced = True
        kept_t = block(n, nt, tstarts, tends)
        traced = False
        recs = trace.stop()
        i, _ = top_up(i + nt, kept_t)  # the traced block's own share of checked calls
        spans = _trace.call_spans(recs, nt) if isinstance(recs, list) else recs
        result["trace"] = stats(spans) if isinstance(spans, list) else spans
        if isinstance(spans, list):
            result["trace"]["events_median"] = stats([_elapsed(s, e) for s, e in zip(tstarts, tends)])["median"]
            result["trace"]["ops"] = _trace.kernel_ops(recs)
    elif trace is not None:
        result["trace"] = "unavailable: " + str(trace.why)
    top_up(i, kept)  # and the timed calls' own
    # wall-clock cross-check: after the timed stream is done, how long until the whole device is?
    # Work left on another stream shows up as that lag, whatever the host overhead of the call.
    walls, lags = [], []
    for i in range(min(10, n)):
        refresh(live, sources[i % k])
        perturb(live)
        _zero(flush)
        _sync()
        end = _Event()
        t0 = _perf()
        call()
        _record(end, stream)
        _esync(end)
        t1 = _perf()
        _sync()
        t2 = _perf()
        walls.append((t2 - t0) * 1e3)
        lags.append((t2 - t1) * 1e3)
    result["wall_ms"] = sorted(walls)[len(walls) // 2]
    result["lag_ms"] = sorted(lags)[len(lags) // 2]
    result["l2_persistence"] = used_l2
    result["launch_ms"], result["spin_ms"], result["spin_cycles"] = launch_ms, spin_ms, spin_cycles
    return result


def _size_spin(launch_ms: float, stream) -> tuple[int, float]:
    """The spin for calls launched in launch_ms: SPIN_FACTOR x that within the bounds, as (cycles,
    ms), the cycles from the device's own rate of the spin kernel, timed here (after the warm-up,
    so at the clock the calls run at)."""
    s, e = _Event(enable_timing=True), _Event(enable_timing=True)
    _spin(SPIN_WARM_CYCLES)  # busy while the timed one is launched, so its launch is not timed
    _record(s, stream)
    _spin(SPIN_WARM_CYCLES)
    _record(e, stream)
    _esync(e)
    per_ms = SPIN_WARM_CYCLES / max(_elapsed(s, e), 1e-3)
    spin_ms = min(SPIN_MAX_MS, max(SPIN_MIN_MS, SPIN_FACTOR * launch_ms))
    return max(1, int(spin_ms * per_ms)), spin_ms
