"""What the candidate driver's operator watch costs a batch, on the device at hand: the profiler
started and stopped around a batch's calls and its records read, as the driver does every batch
before the judge opens the gate (`peer` in a shape's seconds): the watch as the driver runs it
(its own profiler switches, the raw records read), the watch as it was (torch.profiler, then
`key_averages()`), and the calls unwatched.

    python -m benchmarks.watch_cost [--calls 1 40 100 400] [--ops-per-call 6] [--repeats 5] [--out FILE]

A call is --ops-per-call small tensor operations (a kernel's own arithmetic plus the driver's
views). Prints one JSON line per (calls, reading): the median milliseconds a batch over --repeats.

With --sessions N (a GPU), it then runs four kernels of different names N times, each under a
session of torch's own profiler and then under the watch, and prints one line naming every
session of either that did not record all four (and which it missed). Each session registers
CUPTI's timestamp callback again, and some CUPTI versions then corrupt the timestamps of a
session's first kernel records, more as the process goes on (pytorch/pytorch#192021); the profiler
drops them as outside its window, so a watch started once a batch would miss the first kernels of
each later batch, but for its padding (`ablate/evaluate/_watch.py`, sized by the loss it sees: the
line says how many of its fills were lost).
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

from benchmarks._lines import Lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, nargs="+", default=[1, 40, 100, 400])
    p.add_argument("--ops-per-call", type=int, default=6)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--sessions", type=int, default=0, help="then this many sessions' records counted (GPU)")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.sessions < 0:
        p.error(f"--sessions {a.sessions}: a count of sessions, 0 for none")
    import torch

    from ablate.evaluate import _watch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(64, 64, device=device)

    def batch(n):
        for _ in range(n):
            y = x
            for _ in range(a.ops_per_call):
                y = y * 1.0001
        if device == "cuda":
            torch.cuda.synchronize()

    @contextlib.contextmanager
    def key_averages():  # the watch before it ran its own switches and read the raw records
        prof = torch.profiler
        cfg = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
        with prof.profile(activities=[prof.ProfilerActivity.CPU], experimental_config=cfg) as p:
            yield
        {e.key for e in p.key_averages()} & {"aten::rms_norm"}

    watch = _watch.OpWatch(("aten::rms_norm",), device=device)  # on a GPU it records the device's kernels too
    readings = {"unwatched": contextlib.nullcontext, "watch": watch.watch, "key_averages": key_averages}
    lines = Lines(a.out)
    for around in readings.values():  # each profiler's first start (about a second) is set-up, not a batch's
        with around():
            batch(1)
    for n in a.calls:
        for name, around in readings.items():
            times = []
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                with around():
                    batch(n)
                times.append((time.perf_counter() - t0) * 1e3)
            row = {"calls": n, "ops_per_call": a.ops_per_call, "reading": name,
                   "ms_per_batch": round(statistics.median(times), 3)}
            lines.add(row)
    if a.sessions:
        lines.add(sessions(watch, x, a.sessions))
    lines.write()
    return 0


def sessions(watch, x, n: int) -> dict:
    """Over n rounds of four kernels each, one session of torch's own profiler (`torch.profiler`)
    then one of the watch: {sessions, kernels_a_session, raw_missed / missed: [[round, [kernels
    not recorded]], ...], lost: the watch's sessions that did not record their sentinel,
    padding_lost: the padding's fills whose records were lost (the loss the padding took),
    padding: the fills a session opens with after them}. The four kernels' names are those the
    first round's watch recorded."""
    import torch

    from ablate.evaluate import _watch

    def four():
        y = x + 1.0
        y = y * 2.0
        y = torch.neg(y)
        torch.exp(y)
        if x.device.type == "cuda":
            torch.cuda.synchronize()

    def raw_kernels() -> set[str]:
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA]
                                                        if x.device.type == "cuda" else [])
        with torch.profiler.profile(activities=acts) as prof:
            four()
        return {e.name for e in prof.events() if e.device_type != torch.autograd.DeviceType.CPU}

    lost0, padding_lost0, seen, missed, raw_missed = watch.lost, watch.padding_lost, None, [], []
    for i in range(n):
        raw = raw_kernels()
        watch.forget_kernels()
        with watch.watch():
            four()
        names = {k for k, _ in watch.take_kernels()}
        if seen is None:
            seen = {k for k in names if k in raw} or names  # the four, not the watch's own padding
        if lost := sorted(seen - names):
            missed.append([i, [k[:80] for k in lost]])
        if lost := sorted(seen - raw):
            raw_missed.append([i, [k[:80] for k in lost]])
    return {"sessions": n, "kernels_a_session": len(seen or ()), "missed": missed, "raw_missed": raw_missed,
            "lost": watch.lost - lost0, "padding_lost": watch.padding_lost - padding_lost0, "padding": _watch._padding[0]}


if __name__ == "__main__":
    sys.exit(main())
