"""What the candidate driver's operator watch costs a batch, on the device at hand: the profiler
started and stopped around a batch's calls and its records read, as the driver does every batch
before the judge opens the gate (`peer` in a shape's seconds). Both readings of the records: the
raw one the watch uses, and `key_averages()`, which it used before; and the calls unwatched.

    python -m benchmarks.watch_cost [--calls 1 40 100 400] [--ops-per-call 6] [--repeats 5] [--out FILE]

A call is --ops-per-call small tensor operations (a kernel's own arithmetic plus the driver's
views). Prints one JSON line per (calls, reading): the median milliseconds a batch over --repeats.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, nargs="+", default=[1, 40, 100, 400])
    p.add_argument("--ops-per-call", type=int, default=6)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
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

    readings = {"unwatched": None, "raw": _watch._recorded,
                "key_averages": lambda prof: {e.key for e in prof.key_averages()}}
    lines = [{"command": " ".join(sys.argv), "device": torch.cuda.get_device_name() if device == "cuda"
              else platform.processor() or platform.machine(), "torch": torch.__version__}]
    print(json.dumps(lines[0]), flush=True)
    watch = _watch.OpWatch(("aten::rms_norm",))
    with watch.watch():  # the profiler's first start (about a second) is the driver's set-up, not a batch's
        batch(1)
    try:
        for n in a.calls:
            for name, read in readings.items():
                _watch._recorded = read
                times = []
                for _ in range(a.repeats):
                    t0 = time.perf_counter()
                    with watch.watch() if read else contextlib.nullcontext():
                        batch(n)
                    times.append((time.perf_counter() - t0) * 1e3)
                row = {"calls": n, "ops_per_call": a.ops_per_call, "reading": name,
                       "ms_per_batch": round(statistics.median(times), 3)}
                lines.append(row)
                print(json.dumps(row), flush=True)
    finally:
        _watch._recorded = readings["raw"]
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
