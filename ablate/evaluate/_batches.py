"""A shape's time on a GPU, by the judge's clock: batches of calls the candidate queues behind a
gate word, stamped and watched on the judge's own stream (see _shape's docstring for the whole
protocol and _clock for the kernels). ShapeJudge takes its GPU timing from GpuTiming."""
from __future__ import annotations

import math
import os
import time
from statistics import median

from ablate.evaluate import _exchange

TARGET_BATCH_MS = 8.0  # a batch's calls add up to about this (the protocol's own cost is ~10 us a batch)
BUDGET_MS = 100.0  # timed calls per shape, in all
MIN_BATCHES, MAX_BATCHES = 3, 40
MAX_WALL_S = 20.0  # one shape's timing, whatever the kernel's speed
WITNESS_NS = 5_000_000  # twice a time slice (2.4 ms on an H200: benchmarks/results/h200-judge-clock)
GAP_NS = 20_000  # a gap in a witness longer than this is another context's turn on the device
FILL_SLACK = 1.5  # a copy into the slots this much slower than the setup's (plus FILL_SLACK_NS): contended
FILL_SLACK_NS = 50_000
QUEUE_WAIT_S = 5.0  # the peer's "called" for a gated batch, before the gate opens anyway
# The protocol's own cost a batch, through the library process: PROTOCOL_ROUNDS batches each of one
# call and of PROTOCOL_CALLS calls of a plain copy, the cost being what a batch of no call would take
PROTOCOL_ROUNDS, PROTOCOL_CALLS = 5, 8
# A fitted cost outside this range (ms) is a measurement gone wrong, not the handover (about 0.35 ms
# on an H200): taken off, a too large one would push fast kernels toward zero, so it is not believed
PROTOCOL_RANGE_MS = (-0.05, 2.0)


def batch_length(most: int) -> int:
    """How many calls a timed batch holds: drawn by the judge from the top quarter up to `most`
    (at least two sizes once `most` >= 2), so the candidate cannot know which of its calls ends a
    batch. A kernel that leaves its calls' work to a later call, to run them as one launch, has
    to guess when to run it; the batch's last call is always checked (ShapeJudge.draw), and a
    batch that ends before the guessed call shows its output unwritten (stale_output)."""
    if most < 2:
        return max(most, 1)
    low = most - max(1, most // 4)
    return low + int.from_bytes(os.urandom(4), "little") % (most - low + 1)


def batch_verdict(words: list[int], n: int, fill_ns: float | None, queued: bool,
                  queue_ns: float | None = None) -> tuple[float, str | None, float]:
    """From a batch's stamps and witnesses (the judge's words: 0 and 1 around the copy into the
    slots, 2 the gate's opening, 3 the end, witnesses at 16, 24 and 32): (window in ms, why the
    batch is void or None, the copy's nanoseconds a call). fill_ns: that copy in the shape's first
    batch (None: this is it). queue_ns: the judge's host queueing that copy, ns a call, if known."""
    from ablate.evaluate._clock import gaps

    window = (words[3] - words[2]) / 1e6
    fill = (words[1] - words[0]) / n  # per call: batches differ in size
    if fill_ns is not None and fill > fill_ns * FILL_SLACK + FILL_SLACK_NS / n:
        g = gaps(words[16:21])  # said too: a slow copy-in beside no other context's slice right after it
        host = "" if queue_ns is None else f"; the judge's host queued the copies in {queue_ns / 1e3:.1f} us a call"
        return window, (f"the inputs took {fill / 1e3:.1f} us a call to copy in, {fill_ns / 1e3:.1f} us the first "
                        f"time; the witness before the start saw {g['gap_ns'] / 1e3:.0f} us of gaps{host}"), fill
    for name, at in (("before the start", 16), ("after the end", 24), ("after the check", 32)):
        g = gaps(words[at:at + 5])
        if g["gaps"]:
            return window, (f"another context ran {g['gap_ns'] / 1e3:.0f} us {name} (longest "
                            f"{g['longest_gap_ns'] / 1e3:.0f} us)"), fill
    if not queued:
        return window, "the calls were not all queued before the gate opened", fill
    return window, None, fill


class GpuTiming:
    """ShapeJudge's GPU timing (it supplies peer, slots, kernels, words, stream, call_msg,
    receive_called, receive_ran, copy_out, check_timed, failures_of, timed_inputs, draw and spending)."""

    # gpu_batch's state, defaulted here so every caller (time_gpu, which resets it, and protocol_cost)
    # starts from it
    fills: tuple = ()  # every batch's copy-in, ns a call; the first is the yardstick for the rest
    # the host's part: how long the judge took to queue a batch's copies, ns a call (run_batch sets
    # queue_ns for gpu_batch; a copy-in far above it waited on the device, one near it on the host)
    queue_ns: float | None = None
    queues: tuple = ()
    max_n: int = 1 << 20
    # a batch the device has run and the judge has not yet judged: (b, n, its report, the drawn calls'
    # staged inputs, the drawn calls, their copies); judged while the peer queues the next batch (settle)
    pending: tuple | None = None

    def time_gpu(self, fails: dict, protocol_ms: float = 0.0) -> dict | None:
        """Batches on the judge's clock until BUDGET_MS of calls are timed (see the docstring). The
        first clean batch (two calls) is a warm-up that sizes the rest; it is not counted.
        protocol_ms: the protocol's own cost in a batch (protocol_cost, measured through the
        library process, never the candidate's), taken off every batch's window."""
        start_wall = time.monotonic()
        per_call, windows, sizes, est, b, timed_ms = [], [], [], None, 0, 0.0
        self.max_n, self.fills, self.queues = self.slots.count, (), ()
        while True:
            b += 1
            n = min(2, self.max_n) if est is None else \
                batch_length(max(1, min(self.max_n, math.ceil(TARGET_BATCH_MS / max(est, 1e-4)))))
            got = self.gpu_batch(b, n, fails, est)
            if got is None:
                return None
            window_ms, why = got
            if why is not None:
                self.voided.append(f"batch {b}: {why}")
            elif est is None:
                est = max(window_ms - protocol_ms, 1e-4 * n) / n
            else:
                per_call.append(max(window_ms - protocol_ms, 0.0) / n)  # none left: below any floor
                windows.append(window_ms / n)
                sizes.append(n)
                timed_ms += window_ms
            if (len(per_call) >= MIN_BATCHES and timed_ms >= BUDGET_MS) or b >= MAX_BATCHES \
                    or time.monotonic() - start_wall > MAX_WALL_S:
                break
        if not self.settle(fails):
            return None
        if not per_call:
            fails.setdefault("work_outside_window", "no batch of calls could be timed cleanly: "
                                                    + "; ".join(self.voided[:3]))
            return None
        s = sorted(per_call)
        q = lambda p: s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]  # noqa: E731
        rest = self.fills[1:] or self.fills
        # the yardstick and what the batches after it took, void ones too: how near the slack they ran
        copy_in = {"first": round(self.fills[0] / 1e3, 2), "median": round(median(rest) / 1e3, 2),
                   "max": round(max(rest) / 1e3, 2)}
        if self.queues:
            copy_in["host_median"] = round(median(self.queues) / 1e3, 2)
        return {"median": median(s), "p10": q(0.1), "p90": q(0.9), "n": len(s), "wall_ms": median(windows),
                "batches": b, "voided": len(self.voided), "calls_per_batch": round(median(sizes)),
                "protocol_ms": protocol_ms, "copy_in_us": copy_in}

    def protocol_cost(self) -> float | None:
        """What the protocol itself adds to a batch's window, in ms, or None when no batch of a
        size was clean. The peer must be the library process running its plain copy (the judge's
        own code, so a candidate cannot make this larger and so its own time smaller): batches of
        1 and of PROTOCOL_CALLS calls, and the window a batch of no call would have, from the two
        medians. Not an empty batch itself: one (a marker set at once) skips what the device does
        when the first kernel after the gate runs; in h200-judge-clock's first protocol empty
        batches took 50-200 us where batches of calls carried 420 us."""
        fails: dict = {}
        one, many = [], []
        b = 0
        for _ in range(PROTOCOL_ROUNDS):
            for n, windows in ((1, one), (PROTOCOL_CALLS, many)):
                b += 1
                got = self.gpu_batch(b, n, fails, None)
                if got is None:
                    return None
                if got[1] is None:
                    windows.append(got[0])
        if not self.settle(fails):
            return None
        if not one or not many:
            return None
        w1, wn = median(one), median(many)
        return (PROTOCOL_CALLS * w1 - wn) / (PROTOCOL_CALLS - 1)  # may be slightly negative: noise

    def gpu_batch(self, b: int, n: int, fails: dict, est_ms: float | None):
        """One gated batch of n calls: (window ms, why it is void or None), or None when the kernel
        failed (fails says why). The first batch's copy-in time is the yardstick for later ones
        (fills); a batch whose calls could not all be queued caps later batches (max_n)."""
        got = self.run_batch(b, n, fails, est_ms)
        if got is None:
            return None
        words, queued = got
        window, why, fill = batch_verdict(words, n, self.fills[0] if self.fills else None, queued, self.queue_ns)
        self.fills += (fill,)
        if self.queue_ns is not None:
            self.queues, self.queue_ns = self.queues + (self.queue_ns,), None
        if why is not None and not queued:  # a queue too short for this many launches, or a call that waits on the device
            self.max_n = max(1, n // 4)
            if "not all queued" not in why:
                why += "; its calls were not all queued in time"
        return window, None if why is None else f"{n} calls: {why}"

    def run_batch(self, b: int, n: int, fails: dict, est_ms: float | None):
        """The device's part of gpu_batch: (the judge's words, whether every call was queued before
        the gate opened), or None when the kernel failed. Everything after the peer's calls are
        queued is queued on the judge's stream at once; the host only waits for it."""
        from ablate.evaluate import _cuda

        torch, k, w, st = self.torch, self.kernels, self.words, self.stream
        ptr = w.data_ptr()
        staged = [self.timed_inputs(b, j) for j in range(n)]
        torch.cuda.synchronize()
        self.peer.send("call", shape=self.i, batch=b, gated=True, check=False, first=b == 1, calls=self.call_msg(range(n)))
        prior_ok = self.settle(fails)  # the batch before, judged while the peer queues this one
        msg = self.receive_called(b, QUEUE_WAIT_S)
        queued = msg is not None
        drawn = sorted(set(self.draw(n))) if queued else []
        # the start: the inputs into the slots, a witness, the gate
        k.stamp(st, ptr + 0)
        t0 = time.perf_counter_ns()
        views = [self.slots.place(j, ins, self.entry_plan) for j, (ins, _) in enumerate(staged)]
        self.queue_ns = (time.perf_counter_ns() - t0) / n
        k.stamp(st, ptr + 8)
        k.witness(st, ptr + 16 * 8, WITNESS_NS, GAP_NS)
        k.open(st, ptr + 2 * 8, self.slots.gate_ptr, b)
        # the end: the judge's stream waits for the peer's marker, stamps, watches, copies out the
        # drawn calls, watches again
        _cuda.wait_value(st, self.slots.marker_ptr, b)
        k.stamp(st, ptr + 3 * 8)
        k.witness(st, ptr + 24 * 8, WITNESS_NS, GAP_NS)
        try:
            snap = self.copy_out(msg, drawn, views)
        except _exchange.Malformed:
            self._release(b)  # the judge's stream must not wait on a batch that will never be judged
            raise
        k.stamp(st, ptr + 4 * 8)
        k.witness(st, ptr + 32 * 8, WITNESS_NS, GAP_NS)
        done = torch.cuda.Event()
        done.record()
        limit = max(30.0, 0.02 * n * (est_ms or 10.0))
        deadline = time.monotonic() + limit
        with self.spending("device"):
            while not done.query():
                if time.monotonic() > deadline:
                    self.pending = None
                    self._release(b)
                    fails.setdefault("timeout", f"a batch of {n} calls did not end within {limit:.0f} s")
                    fails["fatal"] = True
                    return None
                if not self.peer.alive():
                    self._release(b)
                    raise _gone("the peer ended during a batch")
                time.sleep(0.0005)
        words = w.cpu().tolist()
        if msg is None:
            msg = self.receive_called(b, QUEUE_WAIT_S)
            if msg is None:
                raise _gone("the peer did not report its batch")
        # only the drawn calls' inputs are kept: the next batch's are drawn while this one waits
        self.pending = (b, n, msg, [ins if j in drawn else None for j, ins in enumerate(staged)], drawn, snap)
        if not prior_ok or len(msg["calls"]) < n or any(c.get("reason") for c in msg["calls"]):
            # judged now: a batch after one that failed would only be wasted on the kernel (this one
            # ran all the same, its calls were queued, and is judged too, so no report is left unread)
            return (words, queued) if self.settle(fails) and prior_ok else None
        return words, queued

    def settle(self, fails: dict) -> bool:
        """Judge the batch left pending, if any (judge_batch); False when it failed. Run while the
        peer queues the next batch, its calls held behind the gate, so the checks cost no wall time
        of their own; the device is idle again before the next batch's stamps."""
        if self.pending is None:
            return True
        pending, self.pending = self.pending, None
        ok = self.judge_batch(*pending, fails)
        self.torch.cuda.synchronize()
        return ok

    def judge_batch(self, b: int, n: int, msg: dict, staged, drawn, snap, fails: dict) -> bool:
        """A batch the device has run: its reports' failures, and whether its drawn calls are right,
        then the peer's second report ("ran", what its watch saw), read whatever the check found.
        The checks read only the judge's own copies, taken on the device right after the calls, so
        nothing the peer does after the batch reaches them."""
        self.failures_of(msg, fails, "during timing: ")
        checked = self._check_batch(msg, staged, drawn, snap, n, fails)
        self.failures_of(self.receive_ran(b), fails, "during timing: ")
        return checked

    def _check_batch(self, msg: dict, staged, drawn, snap, n: int, fails: dict) -> bool:
        if any(c.get("reason") for c in msg["calls"]) or len(msg["calls"]) < n:
            self.check_timed(msg, staged, [], fails, {})
            return False
        if any(snap[j][0] is None for j in drawn):
            fails.setdefault("protocol_violation", "a timed call's outputs were not described")
            return False
        return self.check_timed(msg, staged, drawn, fails, snap)

    def _release(self, b: int) -> None:
        """Set the marker from the host (a stream of its own), so the judge's stream waiting on it
        goes on: the batch failed and its wait must not hold the device."""
        side = self.torch.cuda.Stream()
        with self.torch.cuda.stream(side):
            self.slots.raw[_exchange.MARKER:_exchange.MARKER + 4].view(self.torch.int32).fill_(b)
        side.synchronize()
        self.torch.cuda.synchronize()


def _gone(why: str):
    from ablate.evaluate._shape import Gone

    return Gone(why)
