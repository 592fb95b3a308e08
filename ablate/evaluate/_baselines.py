"""Baselines and ceilings, in the judge: the GPU's speed-of-light ceilings and every library
baseline's time per shape, measured before any submitted code runs and cached (per GPU, driver,
library versions and operator definition). A baseline counts only when its outputs pass the same
correctness rule as the candidate's: the best library of a shape is the fastest that passed."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

from ablate.evaluate import _cache
from ablate.evaluate._link import discard_library


def ceilings(info: dict, note, measure, rate=None) -> dict:
    """The GPU's ceilings, cached per GPU, driver and torch, with the canary copy's rate when they
    were measured: the idle rate every contention check compares against. If the canary runs
    faster now than that by more than contention's margin, they were measured while another
    process used the GPU (every later check would be lenient), so they are measured again, under a
    new id, and the baselines cached under the old id are timed again too. rate() -> the canary's
    GB/s now; None skips the check."""
    from ablate.evaluate._gpu import measured_under_load

    key = f"{info['name']}|{info['driver']}|{info['torch']}|v4"
    found = _cache.get("ceilings", key)
    if found is not None and rate is not None and (why := measured_under_load(found, rate)):
        note(f"{why}, so its ceilings and baselines are measured again")
        found = None
    if found is None:
        note("measuring this GPU's memory bandwidth and matmul rate (once per GPU, then cached)")
        found = {**measure(), "id": os.urandom(6).hex()}
        _cache.put("ceilings", key, found)
    return found


def availability(ev) -> dict[str, str | None]:
    """{library: why it cannot run here, or None}, asked once an evaluation (the envelopes and the
    library times both need it). An optional library's check imports it, so it runs in the library
    process (_library.Library.available), which imports it anyway to run it, never in the judge. A
    library found runnable, or not installed, is remembered under the key of this device and these
    versions (_key: installing a library changes them), so a warm judge asks nothing (asking starts
    the library process: 4.7 s of a warm first evaluation on an H100, benchmarks/results/
    h100-library-process); one installed that failed to load is asked again every time."""
    from ablate.operators._baselines import NOT_INSTALLED

    out = {name: "needs CUDA" for name, b in ev.op.baselines.items() if b.needs_cuda and ev.device != "cuda"}
    key = _key(ev, "", "availability", "v1")
    known = _cache.get("availability", key)
    known = known if isinstance(known, dict) else {}
    ask = [name for name in ev.op.baselines if name not in out and name not in known]
    found = ev.library().available(ev.op.name, ev.cfg.get("operator_node"), ask) if ask else {}
    if settled := {name: why for name, why in found.items() if why is None or why.endswith(NOT_INSTALLED)}:
        _cache.put("availability", key, {**known, **settled})
    said = {**known, **found, **out}
    return {name: said[name] for name in ev.op.baselines}


class LibraryCalls:
    """call(name, *inputs) -> the library's outputs on `inputs`, called in the judge's library
    process as a timed library is (_library), and read as a candidate's outputs are (_shape): a
    compiled library is then compiled once, in the process that times it. Called in the judge's own
    process as well, each was compiled twice, 15 of a cold setup's 57 s on an H100
    (benchmarks/results/h100-setup-cost). The process and the shape's slot open on the first call;
    a library that breaks the process is said (RuntimeError) and the next call starts another."""

    def __init__(self, ev, shape: dict):
        self.ev, self.shape, self.sj = ev, shape, None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        sj, self.sj = self.sj, None
        if sj is not None:
            sj.close()

    def __call__(self, name: str, *ins) -> tuple:
        from ablate.evaluate import _channel
        from ablate.evaluate._shape import Gone, ShapeJudge

        ev = self.ev
        try:
            lib = ev.library()
            if self.sj is None:
                sj = ShapeJudge(ev, ev.shapes.index(self.shape), self.shape, lib.peer())
                sj.open(1, ins)
                self.sj = sj
            lib.use(ev.op.name, ev.cfg.get("operator_node"), name)
            outs, why, broken = self.sj.library_outputs(ins)
        except (Gone, _channel.Closed, ValueError, OSError) as e:  # ValueError: a malformed report
            outs, why, broken = None, f"the library process broke: {type(e).__name__}: {e}", True
        if broken:  # the next call starts another process, and opens its slot again
            with contextlib.suppress(Exception):
                self.close()
            discard_library(ev.device)
        if why is not None:
            raise RuntimeError(why)
        return outs


def operator_hash(op, node: dict | None) -> str:
    """Identifies the operator's definition (its folder's code, its task files, how it was
    loaded): part of the baseline cache key, so an edited operator is measured again."""
    from ablate import operators

    h = hashlib.sha256(json.dumps(node or {}, sort_keys=True, default=str).encode())
    files = set(Path(p) for p in op.task_files.values())
    here = Path(operators.__file__).parent
    files.add(here / "_inputs.py")  # how every operator's input distributions are drawn
    if op.name in operators.REGISTRY:
        files |= set(Path(sys.modules[operators.REGISTRY[op.name]].__file__).parent.glob("*.py"))
    elif (adapter := here / f"{(node or op.source or {}).get('source', '')}.py").is_file():
        files.add(adapter)  # an external format's adapter draws its inputs and builds its reference
    for p in sorted(files):
        try:
            h.update(p.name.encode() + p.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:16]


def for_shape(ev, shape: dict, verdicts: dict[str, dict]) -> dict:
    """{"ms": {name: median}, "skipped": {name: reason}, "kernels": {name: its library kernels}, ...}
    for one shape. verdicts: {distribution:
    {name: the calibration's verdict}}: only a library that passed the correctness rule on every
    distribution is timed."""
    from ablate.operators import shape_id

    ms, skipped, todo, noisy, contended, kernels = {}, {}, [], [], {}, {}
    for name, b in ev.op.baselines.items():
        if (why := ev.unavailable[name]) is not None:
            skipped[name] = why
        elif (why := _not_passing(name, verdicts)) is not None:
            skipped[name] = why
        else:
            todo.append((name, b))
    if not todo:
        return {"ms": ms, "skipped": skipped}
    ceilings_id = str((ev.ceilings or {}).get("id", ""))  # timed beside these ceilings: measured again with them
    keys = {name: _key(ev, shape_id(shape), name, ev.mode, ceilings_id, "v7") for name, _ in todo}
    cached = {name: _cache.get("baselines", keys[name]) for name, _ in todo} if ev.device == "cuda" else {}
    for name, b in todo:
        entry = cached.get(name)
        if entry is None:
            if ev.device == "cuda":  # minutes on a cold cache (torch.compile); cached after
                ev.note(f"{shape_id(shape)}: timing baseline {name} (once per GPU and versions, then cached)")
            entry = measure(ev, shape, name)
            if ev.device == "cuda":  # where a cold setup goes, library by library
                ev.note(f"{shape_id(shape)}: timed baseline {name} in {entry['seconds']:.1f} s "
                        f"({len(entry.get('runs') or ())} runs)")
            if ev.device == "cuda" and not entry.get("contended"):  # a shared GPU's time is used once, not kept
                _cache.put("baselines", keys[name], entry)
        if entry.get("error"):
            skipped[name] = entry["error"]
        else:
            ms[name] = entry["ms"]
            kernels[name] = list(entry.get("kernels") or ())
            if entry.get("noisy"):
                noisy.append(name)
            if entry.get("contended"):
                contended[name] = entry["contended"]
    return {"ms": ms, "skipped": skipped, "noisy": noisy, "contended": contended, "kernels": kernels}


def _key(ev, sid: str, *what: str) -> str:
    """A cache key of this GPU, driver, library versions, operator and shape, then `what`."""
    return "|".join([ev.info["name"], str(ev.info["driver"]), json.dumps(ev.libs, sort_keys=True), ev.op.name,
                     ev.op_hash, sid, *what])


def _not_passing(name: str, verdicts: dict[str, dict]) -> str | None:
    """Why a library does not count for a shape (its calibration on some distribution), or None."""
    for dist, found in verdicts.items():
        v = found.get(name)
        if v is None or v["status"] == "pass":
            continue
        if v["status"] == "excluded":
            return f"excluded by contract rule {v['rule']} ({dist} inputs): {v['message'][:300]}"
        if v["status"] == "fail":
            return f"excluded, incorrect on {dist} inputs (margin {v['margin']:.3g}): {v['message'][:300]}"
        return f"excluded on {dist} inputs: {v['message'][:300]}"
    return None


# A kernel of ATen's generic templates (TensorIterator's elementwise and reduction kernels, copies,
# fills) launched inside a library operator is a plain tensor operation, which a kernel may use; so
# is a memset or memcpy the device ran for one (on an H100 aten::mm runs a "Memset (Device)" first)
GENERIC_KERNEL = re.compile(r"elementwise_kernel|reduce_kernel|CatArrayBatchedCopy|\bfill|copy_kernel|_copy_|^Mem(set|cpy)\b")

AGREE = 0.03  # two timing runs of a baseline within 3% of each other are taken as undisturbed
MAX_RUNS = 4


def _agreeing(medians: list[float]) -> list[tuple[float, float]]:
    return [(a, b) for i, a in enumerate(medians) for b in medians[i + 1:] if abs(a - b) <= AGREE * min(a, b)]


def settled(medians: list[float]) -> float | None:
    """The baseline's time from its runs' medians, or None while more runs are needed: the smaller
    of the first two that agree within AGREE (a disturbance, another process on the device or the
    host, only makes a run slower); after MAX_RUNS runs the smallest, whatever the spread."""
    pairs = _agreeing(medians)
    if pairs:
        return min(pairs[0])
    return min(medians) if len(medians) >= MAX_RUNS else None


def protocol_ms(ev, shape: dict) -> float:
    """The judge's protocol's own cost in one batch on this shape (GpuTiming.protocol_cost: the
    device handed from the judge's context to the peer's at the gate and back at the marker, about
    0.35 ms on an H200: benchmarks/results/h200-judge-bias), taken off every batch of the candidate
    and of every library alike. Measured through the library process running a plain copy before
    the candidate runs, and cached beside the baselines (0.0 on a CPU, where no batch is timed
    this way)."""
    from ablate.evaluate._batches import PROTOCOL_CALLS, PROTOCOL_RANGE_MS
    from ablate.evaluate._library import PLAIN_COPY
    from ablate.evaluate._shape import ShapeJudge
    from ablate.operators import shape_id

    if ev.device != "cuda":
        return 0.0
    memo = ev.__dict__.setdefault("_protocol_ms", {})
    sid = shape_id(shape)
    if sid in memo:
        return memo[sid]
    key = _key(ev, sid, str((ev.ceilings or {}).get("id", "")), "v1")
    found = _cache.get("protocol", key)
    if found is None:
        try:
            lib = ev.library()
            lib.use(ev.op.name, ev.cfg.get("operator_node"), PLAIN_COPY)
            sj = ShapeJudge(ev, ev.shapes.index(shape), shape, lib.peer())
            sj.draws_per_batch = 0  # its outputs are copies, not the operator's: nothing to check
            try:
                sj.open(PROTOCOL_CALLS, ev.input_set(shape, 0, references=False)[0])
                found = sj.protocol_cost()
            finally:
                sj.close()
        except Exception as e:  # noqa: BLE001 (a library process that cannot start: said, as below)
            discard_library(ev.device)
            ev.note(f"{sid}: the protocol's own cost could not be measured: {type(e).__name__}: {e}")
        low, high = PROTOCOL_RANGE_MS
        if found is None:  # no batch of a size was clean (another context ran): said, nothing taken off
            ev.flags.append("protocol_cost_unmeasured")
            found = 0.0
        elif not low <= found <= high:  # not believed, not cached: said, nothing taken off
            ev.note(f"{sid}: the protocol's own cost came out at {found:.3f} ms a batch, outside "
                    f"{low}..{high} ms: not taken off")
            ev.flags.append("protocol_cost_implausible")
            found = 0.0
        else:
            found = max(0.0, found)
            _cache.put("protocol", key, found)
    memo[sid] = float(found)
    return memo[sid]


def time_library(ev, shape: dict, name: str, kernels: set | None = None) -> float:
    """One timing of a library on a shape: its median per call, by the judge's clock, in the
    judge's library process (_library), exactly as a candidate is timed (_shape). kernels: gets
    the device kernels the library ran inside the operator's library operators (library_kernels)."""
    from ablate.evaluate._shape import ShapeJudge, batch_calls

    cost = protocol_ms(ev, shape)  # first: it runs a function and slots of its own in the process
    lib = ev.library()
    lib.use(ev.op.name, ev.cfg.get("operator_node"), name)
    i = ev.shapes.index(shape)
    sj = ShapeJudge(ev, i, shape, lib.peer())
    sj.draws_per_batch = 1
    fails: dict = {}
    try:
        sample = ev.input_set(shape, 0, references=False)[0]
        sj.open(batch_calls(ev, shape, 1 << 20), sample)
        del sample
        if ev.device == "cuda":
            sj.warm_up(fails)
        timing = (sj.time_gpu(fails, cost) if ev.device == "cuda" else sj.time_cpu(fails)) if not fails else None
    finally:
        sj.close()
    fails.pop("fatal", None)
    if timing is None or fails:
        raise RuntimeError("; ".join(f"{k}: {str(v)[:200]}" for k, v in fails.items()) or "no time")
    if kernels is not None:
        kernels.update(library_kernels(ev.op.library_ops, sj.device_kernels))
    return timing["median"]


def library_kernels(library_ops, ran) -> set[str]:
    """Of the device kernels a library ran ([(kernel, the operator that launched it)]), those a
    library operator of the task launched itself (a kernel of a plain tensor operation inside one,
    a copy or a fill, is anyone's, and stays allowed): one of them run by a candidate is a library
    passthrough (_watch.OpWatch), however it was reached."""
    from ablate.operators._library_ops import recorded_names

    ops = recorded_names(library_ops)
    return {k for k, op in ran if op in ops and not GENERIC_KERNEL.search(k)}


def measure(ev, shape: dict, name: str, timer=None, probe=None) -> dict:
    """A baseline's time on a shape: its time is cached and decides every ratio on this device,
    so it is timed until two runs agree (settled), and the GPU is probed for another process's
    load (_gpu.contention), which two runs slowed alike would agree on, both before the runs and
    after them (a load must then start and stop between two probes to go unseen). timer() ->
    median ms, probe() -> why the GPU is shared or None (tests stand in for both). The entry says
    how long it all took (`seconds`): where a cold setup goes."""
    t0 = time.perf_counter()
    out = _measured(ev, shape, name, timer, probe)
    out["seconds"] = time.perf_counter() - t0
    return out


def _measured(ev, shape: dict, name: str, timer, probe) -> dict:
    from ablate.evaluate import _gpu

    kernels: set = set()
    try:
        timer = timer or (lambda: time_library(ev, shape, name, kernels))
        probe = probe or (lambda: _gpu.contention(ev.ceilings))
        before = probe() if ev.device == "cuda" else None
        runs = [timer()]
        if ev.device != "cuda":  # the interpreter's clock is labelled, not compared: one run
            return {"ms": runs[0], "runs": runs}
        while (ms := settled(runs)) is None:
            runs.append(timer())
        out = {"ms": ms, "runs": runs, "kernels": sorted(kernels)}
        if not _agreeing(runs):
            out["noisy"] = True  # no two runs agreed: said in the row, this library's time may be off
        if why := probe() or before:
            out["contended"] = why
        return out
    except Exception as e:  # a broken library is reported, not fatal
        discard_library(ev.device)  # and the process it broke in is not used again
        return {"error": f"raised {type(e).__name__}: {str(e)[:300]}"}
