"""What one checked input set costs on the calling side, part by part: the driver a candidate runs
(the judge's library process runs the same one, `ablate/evaluate/_library.py`), called once a set
through the judge's own messages, as `ShapeJudge.check_set` calls it, in three ways interleaved:

    as_checked  its memory poisoned first and the call watched (what a check set asks for)
    watched     watched, nothing poisoned
    bare        neither (a library's warm-up call)

    python -m benchmarks.check_set_cost --operator rmsnorm --shapes public \
        [--library torch_F.rms_norm] [--sets 15] [--out FILE]

A warm public RMSNorm shape's checking waited 0.58 s for a candidate's 15 answers on an H100,
against 3.3 ms a set for this driver (benchmarks/results/h100-evaluator-19). This splits the
driver's part: the round trip of a call (the judge's placing of the inputs, the call, the driver's
report and the judge's mapping of new output segments) and the judge's read of its outputs. The
candidate's own guard (its audit hook) and its watch of the operator's library calls are not in the
library process: what a candidate's set costs above `as_checked` is theirs. Prints one JSON line per
shape and way: the median, p10 and p90 milliseconds over --sets calls (each shape's first call,
which may compile, apart).
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

from benchmarks._lines import Lines, positive

WAYS = {"as_checked": {"check": True, "warm_up": False}, "watched": {"check": False, "warm_up": False},
        "bare": {"check": False, "warm_up": True}}


def _quantiles(xs: list[float]) -> dict:
    """Median, and the 10th and 90th percentiles by nearest rank."""
    xs = sorted(xs)
    rank = lambda q: xs[max(0, math.ceil(q * len(xs)) - 1)]  # noqa: E731
    return {"median_ms": round(statistics.median(xs), 3), "p10_ms": round(rank(0.1), 3),
            "p90_ms": round(rank(0.9), 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--operator", default="rmsnorm")
    p.add_argument("--shapes", default="smoke")
    p.add_argument("--library", default="torch_eager", help="the operator's library the driver calls")
    p.add_argument("--sets", type=positive, default=15, help="calls of each way, a shape")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    import torch

    from ablate import operators
    from ablate.errors import AblateError
    from ablate.evaluate import _channel, _link
    from ablate.evaluate._judge import Evaluation
    from ablate.evaluate._shape import ShapeJudge

    try:  # a name that is not there stops the run before anything is measured
        op = operators.get(a.operator)
        op.shape_set(a.shapes)
    except AblateError as e:
        p.error(str(e))
    if a.library not in op.baselines:
        p.error(f"{a.operator} has no library {a.library!r}; its libraries: {', '.join(sorted(op.baselines))}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    control, sink = _channel.pair()  # the judge's progress lines, unread
    ev = Evaluation({"operator": a.operator, "operator_node": None, "shape_set": a.shapes, "seed": 0,
                     "device": device, "draws": 1, "timing": False, "scan": False}, _channel.Channel(control), "")
    lines = Lines(a.out)
    try:
        ev.setup()
        if ev.unavailable[a.library] is not None:
            p.error(f"{a.library} cannot run here: {ev.unavailable[a.library]}")
        lib = ev.library()
        lib.use(op.name, None, a.library)
        for i, shape in enumerate(ev.shapes):
            sj = ShapeJudge(ev, i, shape, lib.peer())
            sj.open(1, ev.input_set(shape, 0, references=False)[0])
            try:
                trips = {way: [] for way in WAYS}
                reads = {way: [] for way in WAYS}
                first = None
                for k in range(a.sets):
                    for way, flags in WAYS.items():  # interleaved: a drift falls on every way alike
                        ins = ev.input_set(shape, k % len(ev.plans[i]["sets"]), references=False)[0]
                        t0 = time.perf_counter()
                        msg, _ = sj.call_once(ins, first=first is None, **flags)
                        t1 = time.perf_counter()
                        rep = msg["calls"][0]
                        if rep.get("reason"):
                            raise SystemExit(f"{a.library} failed on {operators.shape_id(shape)}: {rep['reason']}: "
                                             f"{str(rep.get('message'))[-300:]}")
                        outs = sj.outputs(rep)
                        if device == "cuda":
                            torch.cuda.synchronize()
                        t2 = time.perf_counter()
                        if first is None:
                            first = (t1 - t0) * 1e3
                            continue
                        trips[way].append((t1 - t0) * 1e3)
                        reads[way].append((t2 - t1) * 1e3)
                        del outs
                for way in WAYS:
                    if trips[way]:
                        lines.add({"operator": op.name, "shape": operators.shape_id(shape), "device": device,
                                   "library": a.library, "way": way, "calls": len(trips[way]),
                                   **_quantiles(trips[way]), "read_median_ms": round(statistics.median(reads[way]), 3),
                                   "first_call_ms": round(first, 3)})
            finally:
                sj.close()
    finally:
        _link.discard_library(device)
        if ev.lock is not None:
            ev.lock.release()
    lines.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
