"""One shape, judged: its input sets checked one by one, then its time taken by the judge's clock,
for a candidate and for every library alike (a library runs in a process of the same kind, through
the same messages: _library).

The peer (the process that calls the kernel) is driven through shared memory (_exchange): the
judge writes each input set into a slot, asks for a batch of calls ("call"), and reads every
output from its own mapping of the memory the output was written into. The peer's report
("called") says where the outputs are and what its own watch saw (the guard, the dispatched
operators, the device's kernels); it carries no time. A gated batch is reported once queued and
again once the device has run it ("ran": what the watch saw, its profile lasting that long).

Timing on a GPU (a batch, all on the judge's stream but the peer's calls):
  the judge draws fresh inputs for every call of the batch into memory of its own; asks the peer
  to queue the calls behind the gate word (the peer answers once they are queued); then
  stamp, copy the inputs into the slots, stamp, witness, open the gate (t0); waits for the peer's
  marker; then stamp (t1), witness, copy out the outputs and inputs of the calls checked (the
  batch's last, and others drawn now), stamp, witness. The batch's time is t1 - t0 over its calls;
  its length is drawn per batch (_batches.batch_length), so no call knows it ends the batch. A
  witness that saw another context's work, or a copy into the slots much slower than at the start,
  voids the batch: work started before t0 or left after t1. The checked calls' outputs must be
  right for their exact inputs (stale_output), and their inputs unchanged (input_mutated).
On a CPU (Triton's interpreter), the judge's clock is the message round trip of a batch; the
peer copies the outputs' raw bytes where the judge reads them before it answers.
"""
from __future__ import annotations

import contextlib
import math
import random
import time

from ablate.evaluate import _channel, _correctness, _exchange, _verdicts
from ablate.evaluate._batches import GpuTiming
from ablate.evaluate._reasons import REASONS

_SYSTEM_RANDOM = random.SystemRandom()  # os.urandom: nothing the candidate seeds or reads predicts a draw
DRAWS_PER_BATCH = 3  # calls of each batch checked against their own reference: its last, and others at random
SLOT_MEMORY = 0.3  # of the device's memory: the slots, the judge's staged inputs and the peer's outputs
CPU_CALLS = 3
VOID_SHARE = 0.25  # more of a shape's batches voided than this, on a GPU no other process uses: rejected
# Timed calls draw N(0,1) only (correctness covers every distribution): a GEMM's speed depends on its
# data (zero and tiny rows draw less power, so the clocks stay up), and rows of zeros would reward a
# kernel that skips them, which real activations do not (benchmarks/results/h200-judge-bias).
TIMED_DISTRIBUTION = "normal"
MAX_CALLS = 512  # a batch's calls, at most (each queued launch waits in the driver's queue until the gate opens)
KERNELS_SHOWN = 16  # device kernels named in a shape's row
RAN_WAIT_S = 300.0  # the peer's "ran", once the device has run its batch (its profile's records read: a
# batch that compiled and autotuned a kernel holds thousands of them)


class Gone(Exception):
    """The peer ended (or broke the protocol) mid-shape."""


class Peer:
    """The process calling the kernel, as a shape sees it: send(kind, fds, **msg), and
    receive(kinds, limit) -> (msg, fds) or None (gone, or nothing within limit seconds)."""

    def __init__(self, send, receive, alive):
        self.send, self.receive, self.alive = send, receive, alive


def batch_calls(ev, shape: dict, n: int) -> int:
    """How many calls one timed batch may hold, by memory: each call needs its inputs in a slot,
    its inputs staged by the judge and its outputs kept by the peer."""
    moved = max(int(ev.op.bytes(shape)), 1)
    total = ev.info.get("memory_bytes") if ev.device == "cuda" else None
    if not total:
        return max(1, min(n, CPU_CALLS))
    return max(1, min(n, MAX_CALLS, int(SLOT_MEMORY * total // (2 * moved))))


class ShapeJudge(GpuTiming):
    def __init__(self, ev, i: int, shape: dict, peer: Peer):
        self.ev, self.i, self.shape, self.peer = ev, i, shape, peer
        self.torch = ev.torch
        self.plan = ev.plans[i]
        self.device = ev.device
        self.slots = self.segments = self.kernels = None
        self.words = None
        self.flags: list[str] = []
        self.voided: list[str] = []
        self.draws_per_batch = DRAWS_PER_BATCH
        self.device_kernels: list[tuple[str, str | None]] = []  # (device kernel, its launching operator), first runs
        # where the shape's seconds went, beside judge_shape's totals: placing the input sets, waiting
        # for the peer's reports of its calls, and for its second report of a gated batch (its watch
        # reading what the device ran), checking the input sets' outputs, drawing the timed calls'
        # inputs, checking the drawn calls, waiting for the device
        self.spent = dict.fromkeys(("placing", "peer", "ran", "checks", "timed_inputs", "timed_checks", "device"), 0.0)

    # -- setup -------------------------------------------------------------------------------
    def open(self, count: int, sample) -> None:
        """Slots for `count` input sets shaped like `sample`, sent to the peer with the marker
        (GPU) or the outputs' memfd (CPU)."""
        self.entry_plan, slot_bytes = _exchange.plan_slot(sample)
        self.slots = _exchange.Slots(self.device, count, slot_bytes)
        self.segments = _exchange.Segments(self.device)
        fds = [self.slots.take_fd()]
        msg = {"shape": self.i, "size": self.slots.size, "nbytes": self.slots.nbytes}
        exp = self.plan.get("expected") or _correctness.expected(self.ev.op, sample)
        self.exp = exp
        self.out_plan, out_bytes = [], 0
        for shp, dtype in exp:
            n = math.prod(shp) * getattr(self.torch, dtype).itemsize if shp is not None else 0
            self.out_plan.append(n)
            out_bytes += -(-n // _exchange.ALIGN) * _exchange.ALIGN
        self.out_slot = max(out_bytes, _exchange.ALIGN)
        if self.device == "cuda":
            from ablate.evaluate import _clock

            self.kernels = self.ev.clock_kernels()
            self.words = self.torch.zeros(64, dtype=self.torch.int64, device="cuda")
            self.stream = self.torch.cuda.current_stream().cuda_stream
            self._clock = _clock
        else:
            fds.append(self.segments.add_cpu(count * self.out_slot))
            msg["out_bytes"] = count * self.out_slot
        try:
            self.peer.send("slots", fds=fds, **msg)
        finally:
            if self.device != "cuda":
                _channel.close_all(fds[1:])
            _channel.close_all(fds[:1])

    def close(self) -> None:
        for part in (self.slots, self.segments):
            if part is not None:
                part.close()
        try:
            self.peer.send("release")
        except _channel.Closed:
            pass

    def dests(self, k: int) -> list[dict] | None:
        if self.device == "cuda":
            return None
        out, off = [], k * self.out_slot
        for n in self.out_plan:
            out.append({"offset": off, "nbytes": n})
            off += -(-n // _exchange.ALIGN) * _exchange.ALIGN
        return out

    def call_msg(self, ks, slots=None) -> list[dict]:
        return [{"inputs": (slots or self.slots).entries(k, self.entry_plan), "outputs": self.dests(k)} for k in ks]

    def batch_slots(self, count: int):
        """Slots for one call message: on a GPU the shape's (a gate holds its calls back); on a CPU
        slots of its own, sent with the message: inputs placed in memory the peer had mapped, a
        thread of the kernel's could compute before the judge's clock starts."""
        return self.slots if self.device == "cuda" else _exchange.Slots("cpu", count, self.slots.slot_bytes)

    def send_calls(self, slots, batch: int, ks, **flags) -> None:
        """The call message for slots `ks`; slots of its own (batch_slots) travel with it."""
        fds = [] if slots is self.slots else [slots.take_fd()]
        try:
            self.peer.send("call", fds=fds, shape=self.i, batch=batch, nbytes=slots.nbytes,
                           calls=self.call_msg(ks, slots), **flags)
        finally:
            _channel.close_all(fds)

    # -- a batch's report --------------------------------------------------------------------
    @contextlib.contextmanager
    def spending(self, what: str):
        """Adds the seconds of the block to spent[what]."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.spent[what] += time.perf_counter() - t0

    def receive_called(self, batch: int, limit: float | None = None) -> dict | None:
        """The peer's report of a batch (its new output segments mapped on the way)."""
        with self.spending("peer"):
            return self._receive_called(batch, limit)

    def _receive_called(self, batch: int, limit: float | None) -> dict | None:
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            got = self.peer.receive(("called", "segments"), wait)
            if got is None:
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                raise Gone("the peer ended before reporting its calls")
            msg, fds = got
            try:
                segs = msg.get("segments") or []
                if self.device == "cuda" and len(segs) != len(fds):
                    raise _exchange.Malformed(f"{len(segs)} segments with {len(fds)} descriptors")
                for (sid, size), fd in zip(segs, fds):
                    self.segments.add_gpu(int(sid), int(size), fd)
                    fds = [f for f in fds if f != fd]
            except (_exchange.Malformed, TypeError, ValueError, KeyError) as e:
                _channel.close_all(fds)
                raise Gone(f"protocol: {e}") from None
            except Exception as e:  # noqa: BLE001 (a descriptor the driver cannot map)
                _channel.close_all(fds)
                raise Gone(f"protocol: an output segment that cannot be mapped: {type(e).__name__}: {e}") from None
            _channel.close_all(fds)
            if msg["kind"] == "segments":
                continue
            if msg.get("batch") != batch or not isinstance(msg.get("calls"), list):
                raise Gone(f"protocol: a report for batch {msg.get('batch')!r}, expected {batch}")
            if not all(isinstance(c, dict) for c in msg["calls"]):
                raise Gone(f"protocol: calls reported as {str(msg['calls'])[:100]}")
            self.kernels_of(msg)
            return msg

    def receive_ran(self, batch: int) -> dict:
        """The peer's second report of a gated batch, once the device has run it: what its watch
        saw (failures, the device's kernels first run)."""
        with self.spending("ran"):
            got = self.peer.receive(("ran",), RAN_WAIT_S)
        if got is None:
            raise Gone("the peer did not report what ran in its batch")
        msg, fds = got
        _channel.close_all(fds)
        if msg.get("batch") != batch:
            raise Gone(f"protocol: a run reported for batch {msg.get('batch')!r}, expected {batch}")
        self.kernels_of(msg)
        return msg

    def kernels_of(self, msg: dict) -> None:
        """Keeps the device kernels a report names ([kernel, its launching operator or None], each
        first run in this process); a report of no such list breaks the protocol."""
        got = msg.get("kernels") or []
        if not isinstance(got, list) or not all(
                isinstance(k, list) and len(k) == 2 and isinstance(k[0], str) and isinstance(k[1], (str, type(None)))
                for k in got):
            raise Gone(f"protocol: device kernels reported as {str(got)[:100]}")
        self.device_kernels.extend((k[:400], op) for k, op in got)
        if msg.get("watch_lost") and "device_watch_incomplete" not in self.flags:
            self.flags.append("device_watch_incomplete")

    def outputs(self, rep: dict) -> list | dict:
        """The outputs one call's report describes, copied out of the peer's memory (Segments.outputs)."""
        return self.segments.outputs(rep, self.exp)

    def copy_out(self, msg: dict, drawn, views) -> dict:
        """{call: (its outputs, or None where reported with a reason; its inputs)}: the judge's own
        copies (views: each call's slot views). Raises Malformed."""
        snap = {}
        for j in drawn:
            rep = msg["calls"][j] if j < len(msg["calls"]) else {"reason": "missing"}
            outs = None if rep.get("reason") else self.outputs(rep)
            snap[j] = (outs, [v.clone() if isinstance(v, self.torch.Tensor) else v for v in views[j]])
        return snap

    @staticmethod
    def failures_of(rep: dict, fails: dict, prefix: str) -> None:
        for reason, text in (rep.get("failures") or {}).items():
            fails.setdefault(reason if reason in REASONS else "protocol_violation", f"{prefix}{text}")

    # -- correctness ---------------------------------------------------------------------------
    def call_once(self, ins, *, check: bool, first: bool, warm_up: bool = False) -> tuple[dict, list]:
        """One ungated call on `ins`, placed in slot 0 (batch_slots): (the peer's report, the slot's views of them)."""
        with self.spending("placing"):  # and the judge's own work on the device (inputs, references) done
            slots = self.batch_slots(1)
            slot_views = slots.place(0, ins, self.entry_plan)  # views: they keep a CPU mapping alive
            if self.device == "cuda":
                self.torch.cuda.synchronize()
        self.send_calls(slots, 0, [0], gated=False, check=check, first=first, warm_up=warm_up)
        return self.receive_called(0), slot_views

    def check_set(self, ins, refs, env, fails: dict, first: bool):
        """An input set on slot 0: one call, its outputs judged. Returns the rule's judgement, or
        None with fails filled (and "fatal" there when nothing more can run)."""
        msg, slot_views = self.call_once(ins, check=True, first=first)
        self.failures_of(msg, fails, "")
        if msg.get("copied"):
            self.flags.append("outputs_copied")
        if not msg["calls"]:
            fails.setdefault("protocol_violation", "a batch of one call reported no call")
            return None
        rep = msg["calls"][0]
        self.failures_of(rep, fails, "")
        if rep.get("threads"):
            self.flags.append("threads_left_running")
        if rep.get("reason"):
            reason = str(rep["reason"])
            fails.setdefault(reason if reason in REASONS else "protocol_violation", str(rep.get("message"))[:4000])
            if rep.get("fatal"):
                fails["fatal"] = True
            return None
        with self.spending("checks"):
            outs = self.outputs(rep)
            for a, b in zip(slot_views, ins):
                if isinstance(a, self.torch.Tensor) and not self.torch.equal(a, b):
                    fails.setdefault("input_mutated", "an input changed during the call")
            if isinstance(outs, dict):
                fails.update(outs)
                return None
            f, j = _correctness.judge_set(self.ev.op, outs, refs, ins, env)
        fails.update({k2: v for k2, v in f.items() if k2 not in fails})
        return j

    def library_outputs(self, ins) -> tuple[tuple | None, str | None, bool]:
        """(outputs, None, False) of the library the library process is using, called once on
        `ins`, unwatched as its warm-up is (it may compile and autotune); or (None, why not, whether
        the process is broken: a crash, the device's memory gone)."""
        msg, _ = self.call_once(ins, check=False, first=True, warm_up=True)
        rep = (msg.get("calls") or [None])[0]
        if not isinstance(rep, dict):
            return None, "the library process reported no call", True
        if rep.get("reason"):
            lines = [ln for ln in str(rep.get("message") or "").splitlines() if ln.strip()]
            return None, f"{rep['reason']}: {lines[-1] if lines else ''}"[:400], bool(rep.get("fatal"))
        outs = self.outputs(rep)
        if isinstance(outs, dict):
            return None, "; ".join(f"{k}: {v}" for k, v in outs.items()), False
        return tuple(outs), None, False

    # -- timing --------------------------------------------------------------------------------
    def warm_up(self, fails: dict) -> None:
        """One untimed, ungated call of a library on the shape, unwatched: the library process
        compiles and autotunes in it (thousands of benchmark kernels, none of them the library's
        own), so every timed batch after it runs under the same profile, the first batch too, whose
        copy-in time is the yardstick for the rest (the judge's copies ran 30 times slower beside a
        batch under the profile than beside one not: benchmarks/results/h100-evaluator-18)."""
        msg, _ = self.call_once(self.timed_inputs(0, 0)[0], check=False, first=True, warm_up=True)
        self.failures_of(msg, fails, "warming up: ")
        for rep in (msg.get("calls") or [])[:1]:
            if rep.get("reason"):
                fails.setdefault("crash", f"warming up: {str(rep.get('message'))[:2000]}")

    def timed_inputs(self, b: int, j: int):
        """Fresh inputs for call j of batch b, and how to rebuild them."""
        from ablate.evaluate import _judge

        dist = TIMED_DISTRIBUTION
        seed = _judge.set_seed(self.ev.cfg["seed"], _judge.shape_key(self.shape), f"timed-{b}", j)
        with self.spending("timed_inputs"):
            return self.ev.op.make_inputs(self.shape, seed, self.device, dist), dist

    def time_cpu(self, fails: dict) -> dict | None:
        """The interpreter's clock: one call untimed, then one batch of CPU_CALLS calls timed by the
        message round trip. A library's first call on a shape (its process checks nothing first)
        took up to twice a warm one's time, which a candidate, warm from its checked calls, would
        have gained as speedup; the untimed call puts both on the same footing."""
        n = min(CPU_CALLS, self.slots.count)
        for b, count in ((1, 1), (2, n)):
            staged = [self.timed_inputs(b, j) for j in range(count)]
            slots = self.batch_slots(count)
            try:
                for j, (ins, _) in enumerate(staged):
                    slots.place(j, ins, self.entry_plan)
                t0 = time.perf_counter()
                self.send_calls(slots, b, range(count), gated=False, check=False, first=False)
                msg = self.receive_called(b)
                # all copied out before any is judged (a kernel's thread writing later calls' outputs
                # meanwhile is seen), and inside the window: the shared memory the outputs are read from
                # is the kernel's to write until the judge's copy, so what the copy holds was written in
                # the time judged
                snap = self.copy_out(msg, range(count), [slots.views(j, self.entry_plan) for j in range(count)])
                ms = (time.perf_counter() - t0) * 1e3 / count
            finally:
                slots.close()
            self.failures_of(msg, fails, "during timing: ")
            if not self.check_timed(msg, staged, range(count), fails, snap):
                return None
        return {"median": ms, "p10": ms, "p90": ms, "n": n, "wall_ms": ms, "batches": 1}

    def check_timed(self, msg: dict, staged, drawn, fails: dict, snap: dict) -> bool:
        """The drawn calls of a timed batch: outputs right for their own inputs, inputs unchanged.
        snap: {call: (outputs, inputs)} copied out right after the batch (copy_out)."""
        with self.spending("timed_checks"):
            return self._check_timed(msg, staged, drawn, fails, snap)

    def _check_timed(self, msg: dict, staged, drawn, fails: dict, snap) -> bool:
        calls = msg["calls"]
        if len(calls) < len(staged) or any(c.get("reason") for c in calls):
            bad = next((c for c in calls if c.get("reason")), None)
            if bad is not None:
                reason = str(bad["reason"])
                fails.setdefault(reason if reason in REASONS else "protocol_violation",
                                 f"during timing: {str(bad.get('message'))[:3000]}")
                if bad.get("fatal"):
                    fails["fatal"] = True
            else:
                fails.setdefault("protocol_violation", f"{len(calls)} calls reported for {len(staged)}")
            return False
        for j in drawn:
            ins, dist = staged[j]
            outs, seen = snap[j]
            if isinstance(outs, dict):
                fails.update({k: f"timed call {j}: {v}" for k, v in outs.items() if k not in fails})
                return False
            if seen is not None and any(isinstance(a, self.torch.Tensor) and not self.torch.equal(a, b)
                                        for a, b in zip(seen, ins)):
                fails.setdefault("input_mutated", f"timed call {j}: an input changed during the call")
            refs = _correctness.reference_outputs(self.ev.op, ins)
            f = _correctness.judge_own_input(self.ev.op, outs, refs, ins, self.plan["envelopes"][dist])
            if f:
                fails.setdefault("stale_output", f"timed call {j}: {next(iter(f.values()))}")
                return False
        return True

    def draw(self, n: int) -> list[int]:
        """The calls of a batch of n checked after it: the last (work a kernel left for a later call
        that never came shows there: _batches.batch_length) and draws_per_batch - 1 others at
        random, distinct (a call checked twice is one check), from the OS's randomness."""
        if self.draws_per_batch < 1 or n < 1:
            return []
        return [n - 1] + _SYSTEM_RANDOM.sample(range(n - 1), min(self.draws_per_batch - 1, n - 1))


def judge_shape(ev, i: int, shape: dict, base: dict | None) -> tuple[dict | None, dict, set]:
    """The row of shape i (ev: the judge's Evaluation), its failures and the checks that ran.
    (None, ...) when the candidate is gone before this shape."""
    from ablate.evaluate._judge import PER_SHAPE, finite

    plan = ev.plans[i]
    row, fails, ran = ev.row(shape, base), {}, set()
    seconds = {"references": 0.0, "checking": 0.0, "peer_checking": 0.0, "peer_first_set": 0.0}
    worst, closest, closest_dist, checked = 0.0, None, None, 0
    sets = plan["sets"]
    sj = ShapeJudge(ev, i, shape, ev.candidate_peer())
    try:
        sample = ev.input_set(shape, 0, references=False)[0]
        count = batch_calls(ev, shape, 1 << 20) if ev.cfg["timing"] else 1
        sj.open(count, sample)
        del sample
        for k in range(len(sets)):
            t0 = time.perf_counter()
            ins, refs, _ = ev.input_set(shape, k)
            seconds["references"] += time.perf_counter() - t0
            dist, d = sets[k]
            t0 = time.perf_counter()
            got: dict = {}
            j = sj.check_set(ins, refs, plan["envelopes"][dist], got, first=k == 0)
            seconds["checking"] += time.perf_counter() - t0
            seconds["peer_checking"] = sj.spent["peer"]  # the peer's share of checking; the rest of peer is timing's
            if k == 0:  # its first call on the shape, where a kernel compiles: apart from the others' answers
                seconds["peer_first_set"] = sj.spent["peer"]
            fatal = got.pop("fatal", False)
            for reason, text in got.items():
                fails.setdefault(reason, f"{dist} draw {d}: {text}")
            if fatal:
                row["fatal"] = True
            if j is None:
                break
            err = j.max_abs
            worst = err if math.isnan(err) or math.isnan(worst) else max(worst, err)
            if closest is None or not j.margin <= closest.margin:
                closest, closest_dist = j, dist
            checked += 1
            del ins, refs
        complete = checked == len(sets)
        if complete:
            ran |= set(PER_SHAPE)
        row["correct"] = complete and not fails.keys() & {"incorrect", "wrong_shape", "wrong_dtype", "exception",
                                                         "crash", "oom", "output_not_dense", "protocol_violation"}
        row["max_abs_error"] = finite(worst) if checked else None
        row.update(_correctness.margin_row(closest, plan["calibration"][closest_dist]["envelope"] if closest else None))
        if ev.cfg["timing"] and row["correct"] and not fails.keys() & {"wrong_device", "bad_signature"}:
            t0 = time.perf_counter()
            timing = sj.time_gpu(fails, ev.protocol_ms(shape)) if ev.device == "cuda" else sj.time_cpu(fails)
            seconds["timing"] = time.perf_counter() - t0
            if fails.pop("fatal", False):
                row["fatal"] = True
            ran |= {"stale_output", "work_outside_window"}
            if timing is not None:
                judge_time(ev, row, shape, timing, fails, ran, sj)
    except Gone as e:
        if str(e).startswith("protocol"):
            fails.setdefault("protocol_violation", str(e))
            row["fatal"] = True
        else:
            return None, fails, ran
    except _exchange.Malformed as e:  # a report the judge cannot read: this shape's rejection, its row kept
        fails.setdefault("protocol_violation", f"protocol: {e}")
        row["fatal"] = True
    except _channel.Closed:
        return None, fails, ran
    finally:
        sj.close()
    row["flags"] = sorted(set(row.get("flags", [])) | set(sj.flags))
    if sj.device_kernels:  # what the device ran for the kernel (and the driver's own copies), first seen here
        row["device_kernels"] = [k[:160] for k, _ in sj.device_kernels[:KERNELS_SHOWN]]
    elif ev.device == "cuda" and i == 0 and row["correct"]:  # the driver's own fills ran at least: no record
        row["flags"].append("device_unwatched")
    row["seconds"] = {k: round(v, 4) for k, v in {**seconds, **sj.spent}.items()}
    row["error"] = "; ".join(f"{k}: {v}" for k, v in fails.items()) or None
    return row, fails, ran

def judge_time(ev, row: dict, shape: dict, timing: dict, fails: dict, ran: set, sj) -> None:
    from ablate.evaluate import _gpu

    if sj.voided:
        row["voided_batches"] = sj.voided[:5]
    contention = _gpu.contention(ev.ceilings) if ev.device == "cuda" else None
    if timing.get("voided") and timing["voided"] > VOID_SHARE * timing["batches"] and not contention:
        fails.setdefault("work_outside_window", f"{timing['voided']} of {timing['batches']} batches saw the "
                                                "candidate's work outside them: " + "; ".join(sj.voided[:3]))
    _verdicts.judge_time(row, shape, timing, fails, ran, op=ev.op, device=ev.device, ceilings=ev.ceilings,
                         l2_bytes=ev.info.get("l2_bytes"), written=_correctness.output_bytes(sj.exp),
                         contention=contention)
