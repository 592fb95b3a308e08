"""What moves a judged time away from triton's do_bench_cudagraph of the same call, measured on a CUDA
machine in one process with CUDA events (no sandbox, no judge): the suspects are the judge's
protocol choices, one at a time.

    python -m benchmarks.judge_bias --operators rmsnorm softmax gemm --shapes public --out DIR

Per operator and shape (the library each operator is checked against in benchmarks.judge_clock):
- working_set: back-to-back calls over k distinct input sets (k = 1, 4, 16, 64, as memory allows),
  the outputs dropped after each call or all kept until the loop ends (the judge keeps every
  call's output of a batch, each in memory of its own);
- distribution: back-to-back calls on each input distribution of operators.DISTRIBUTIONS (the
  judge's timed calls took them in turn), 8 input sets each;
- duty: the same calls in batches of about 8 ms with 20 ms idle between (the judge's batches),
  beside one continuous run of about 300 ms;
- memory: 16 input sets in the judge's slots (shareable device memory, _exchange.Slots) and the
  outputs born in the candidate's output pool (_pool.OutputPool), each alone and both together.
Every row carries its time per call and its ratio to do_bench_cudagraph of the plain call.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

BATCH_MS = 8.0


def _loop(fn, sets, n, keep):
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    kept = []
    torch.cuda.synchronize()
    start.record()
    for j in range(n):
        out = fn(*sets[j % len(sets)])
        if keep:
            kept.append(out)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def _median(xs):
    s = sorted(xs)
    return s[len(s) // 2]


def measure(name: str, shapes: str) -> list[dict]:
    import torch
    import triton

    from ablate import operators
    from ablate.operators import DISTRIBUTIONS
    from benchmarks.judge_clock import LIBRARIES

    op = operators.get(name)
    lib = LIBRARIES[name][0]
    fn = op.baselines[lib].fn
    rows = []
    for shape in op.shape_set(shapes):
        one = op.make_inputs(shape, 11, "cuda", "normal")
        with torch.cuda.stream(torch.cuda.Stream()):
            graph = triton.testing.do_bench_cudagraph(lambda: fn(*one), rep=300, return_mode="median")
        base = {"operator": name, "shape": operators.shape_id(shape), "library": lib, "do_bench_cudagraph_ms": graph}
        calls = max(1, round(BATCH_MS / graph))
        free = torch.cuda.mem_get_info()[0]
        per_set = 2 * max(int(op.bytes(shape)), 1)  # inputs and the output kept
        for k in (1, 4, 16, 64):
            if k * per_set > 0.4 * free:
                break
            sets = [one] + [op.make_inputs(shape, 100 + j, "cuda", "normal") for j in range(k - 1)]
            n = max(k, calls)
            for keep in (False, True):
                _loop(fn, sets, n, keep)
                ms = _median([_loop(fn, sets, n, keep) for _ in range(7)])
                rows.append({**base, "test": "working_set", "sets": k, "outputs_kept": keep, "calls": n,
                             "ms": ms, "ratio_to_graph": ms / graph})
            del sets
        for dist in DISTRIBUTIONS:
            sets = [op.make_inputs(shape, 200 + j, "cuda", dist) for j in range(8)]
            _loop(fn, sets, max(8, calls), False)
            ms = _median([_loop(fn, sets, max(8, calls), False) for _ in range(7)])
            rows.append({**base, "test": "distribution", "distribution": dist, "ms": ms, "ratio_to_graph": ms / graph})
            del sets
        sets = [op.make_inputs(shape, 300 + j, "cuda", "normal") for j in range(8)]
        long_n = max(8, round(300 / graph))
        _loop(fn, sets, long_n, False)
        cont = _median([_loop(fn, sets, long_n, False) for _ in range(3)])
        bursts = []
        for _ in range(15):
            time.sleep(0.02)
            bursts.append(_loop(fn, sets, max(8, calls), False))
        rows.append({**base, "test": "duty", "continuous_ms": cont, "bursts_ms": _median(bursts),
                     "ratio_to_graph": _median(bursts) / graph, "continuous_ratio_to_graph": cont / graph})
        del sets
        rows += _memory(op, fn, shape, base, graph, calls)
        for r in rows[-1:]:
            print(json.dumps(r), flush=True)
    return rows


def _memory(op, fn, shape, base, graph, calls) -> list[dict]:
    import contextlib

    from ablate.evaluate import _exchange
    from ablate.evaluate._pool import OutputPool

    k = 16
    plain = [op.make_inputs(shape, 400 + j, "cuda", "normal") for j in range(k)]
    plan, nbytes = _exchange.plan_slot(plain[0])
    slots = _exchange.Slots("cuda", k, nbytes)
    shared = [tuple(slots.place(j, ins, plan)) for j, ins in enumerate(plain)]
    pool = OutputPool()
    rows = []
    for where_in, sets in (("torch", plain), ("slots", shared)):
        for where_out in ("torch", "pool"):
            ctx = pool.active if where_out == "pool" else contextlib.nullcontext
            with ctx():
                _loop(fn, sets, max(k, calls), True)
                ms = _median([_loop(fn, sets, max(k, calls), True) for _ in range(7)])
            rows.append({**base, "test": "memory", "inputs": where_in, "outputs": where_out, "ms": ms,
                         "ratio_to_graph": ms / graph})
    slots.close()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--operators", nargs="*", default=["rmsnorm", "softmax", "gemm"])
    p.add_argument("--shapes", default="public")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    import torch
    import triton

    a.out.mkdir(parents=True, exist_ok=True)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "command": "python -m benchmarks.judge_bias " + " ".join(sys.argv[1:] if argv is None else argv),
           "rows": []}
    for name in a.operators:
        res["rows"] += measure(name, a.shapes)
        (a.out / "bias.json").write_text(json.dumps(res, indent=1))
    for r in res["rows"]:
        what = {k: r[k] for k in ("sets", "outputs_kept", "distribution", "inputs", "outputs") if k in r}
        print(f"{r['operator']:8} {r['test']:13} {json.dumps(what):45} ratio {r['ratio_to_graph']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
