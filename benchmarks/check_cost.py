"""What one timed call's check costs the judge, part by part, and what the error pass's chunk size
does to it: the fresh inputs, the float64 reference, and the rule's error statistics.

    python -m benchmarks.check_cost --operators rmsnorm softmax --shapes eval \
        [--chunks 4194304 67108864] [--compiled] [--fused] [--repeats 5] [--out FILE]

After each timed batch the judge checks three of its calls against a reference of their own
inputs (ablate/evaluate/_shape.py, `timed_checks`). On the largest memory-bound shapes that, not
the timing, is what a shape's evaluation costs. Prints one JSON line per operator, shape and
chunk size: the median seconds of each part over --repeats, with the device synchronised around
each, and how far each chunk size's statistics are from the first's (summation order only: the
chunk bounds memory). --compiled and --fused add the error pass under torch.compile and as two
Triton kernels (operators/_fused_stats.py, the pass a GPU's judge runs; on a CPU under
TRITON_INTERPRET=1), each line saying which (`pass`). `eager` is the eager pass on every device.
--out writes the lines and the machine to FILE.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from benchmarks._lines import Lines, positive


def _timed(torch, fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def _drift(stats: list[dict], first: list[dict]) -> float:
    """The largest relative difference of a statistic from the first chunk size's (summation order
    moves the last bits; anything more would be a bug)."""
    return max((abs(x[k] - y[k]) / max(abs(y[k]), 1e-30) for x, y in zip(stats, first) for k in x
                if isinstance(x[k], (int, float)) and x[k] != y[k]), default=0.0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--operators", nargs="+", default=["rmsnorm"])
    p.add_argument("--shapes", default="smoke")
    p.add_argument("--chunks", nargs="+", type=positive, default=None, help="elements per pass (default: this device's, GPU_CHUNK or CHUNK)")
    p.add_argument("--compiled", action="store_true",
                   help="each chunk size also with the error pass under torch.compile (its first call timed apart)")
    p.add_argument("--fused", action="store_true",
                   help="each chunk size also with the error pass as two Triton kernels (operators/_fused_stats.py)")
    p.add_argument("--repeats", type=positive, default=5)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    import torch

    from ablate import operators
    from ablate.operators import _correctness as rule
    from ablate.errors import AblateError
    from ablate.operators import _error_stats, shape_id

    try:  # a name that is not there stops the run before anything is measured
        todo = [(name, operators.get(name).shape_set(a.shapes)) for name in a.operators]
    except AblateError as e:
        p.error(str(e))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.fused and device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        p.error("--fused on a CPU runs Triton's interpreter: set TRITON_INTERPRET=1")
    passes = {"eager": _error_stats.chunk_stats}
    if a.compiled:
        passes["compiled"] = torch.compile(_error_stats.chunk_stats, dynamic=True)
    if a.fused:
        from ablate.operators import _fused_stats

        passes["fused"] = _fused_stats.chunk_stats
    knob = "CHUNK" if device == "cpu" else "GPU_CHUNK"  # the pass size on this device
    kept = getattr(_error_stats, knob), _error_stats.PASS
    chunks = a.chunks or [kept[0]]
    lines = Lines(a.out)
    try:
        for name, shapes in todo:
            op = operators.get(name)
            for shape in shapes:
                ins = op.make_inputs(shape, 0, device, "normal")
                refs = rule.reference_outputs(op, tuple(ins))
                env = rule.calibrate(op, tuple(ins), list(refs), {}).envelope
                outs = [t.to(o.dtype) if isinstance(t, torch.Tensor) else t
                        for t, o in zip(refs, rule.as_outputs(op.reference(*ins)))]  # a kernel's outputs, stand-in
                seen = None
                for chunk, kind in [(c, k) for c in chunks for k in passes]:
                    setattr(_error_stats, knob, chunk)
                    _error_stats.PASS = passes[kind]
                    parts: dict[str, list[float]] = {"inputs": [], "reference": [], "error_stats": []}
                    first = _timed(torch, lambda: rule.judge_output(outs, refs, env, tuple(ins)))[1]
                    for _ in range(a.repeats):
                        parts["inputs"].append(_timed(torch, lambda: op.make_inputs(shape, 1, device, "normal"))[1])
                        parts["reference"].append(_timed(torch, lambda: rule.reference_outputs(op, tuple(ins)))[1])
                        j, s = _timed(torch, lambda: rule.judge_output(outs, refs, env, tuple(ins)))
                        parts["error_stats"].append(s)
                    stats = [x.as_dict() for x in j.stats]
                    seen = stats if seen is None else seen
                    lines.add({"operator": name, "shape": shape_id(shape), "device": device, "chunk": chunk,
                               "pass": kind, "compiled": kind == "compiled", "first_error_stats": round(first, 5),
                               "seconds": {k: round(statistics.median(v), 5) for k, v in parts.items()},
                               "ok": j.ok, "stats_drift": _drift(stats, seen)})
                del ins, refs, outs
                if device == "cuda":
                    torch.cuda.empty_cache()
    finally:
        setattr(_error_stats, knob, kept[0])
        _error_stats.PASS = kept[1]
    lines.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
