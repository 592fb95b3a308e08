"""Runs scripted templates at chosen configurations on their operator's smoke shapes (and extra
shapes), for every input distribution, under the Triton CPU interpreter; prints JSON failures per
template.

Run as a subprocess: TRITON_INTERPRET must be set before triton is first imported.
    python tests/operators/template_runner.py softmax layernorm ...        every listed configuration
    python tests/operators/template_runner.py --plan '{"topk": {"configs": [0, 5], "shapes": [...]}}'
"""
import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ablate import operators  # noqa: E402
from ablate.operators._operator import load_module  # noqa: E402

TEMPLATES = ROOT / "harnesses" / "scripted" / "templates"


def fast_xor_sum() -> bool:
    """The interpreter reduces with a combine function it has no numpy twin for one element at a
    time in Python (ReduceOps.generic_reduce). tl.topk's bitonic network takes an xor_sum at every
    compare-and-swap, so that loop was two thirds of topk's interpreter runs, themselves longer than
    every other template's together. An XOR along an axis is what numpy.bitwise_xor.reduce computes,
    exactly (integers, associative and commutative), so it gets the fast path tl.sum, tl.max and
    tl.min already have. A probe kernel's xor_sums (every axis, keep_dims or not, int16/32/64) must
    equal both the element-by-element loop's and Python's own XOR of the same integers before the
    fast path is kept; on a Triton without these internals nothing is patched (slower, same
    results). True when patched."""
    import functools
    import operator

    import numpy as np
    import torch
    from triton.runtime import interpreter

    ops, combine = getattr(interpreter, "ReduceOps", None), getattr(tl.standard, "_xor_combine", None)
    if ops is None or combine is None or not hasattr(ops, "apply_impl"):
        return False
    slow = ops.apply_impl

    def fast(self, input):
        if self.combine_fn is combine and self.axis is not None and len(input) == 1:
            data = input[0].handle.data
            return [self.to_tensor(np.bitwise_xor.reduce(data, axis=self.axis, keepdims=self.keep_dims),
                                   input[0].dtype)]
        return slow(self, input)

    g = torch.Generator().manual_seed(0)
    for dtype in (torch.int16, torch.int32, torch.int64):
        info = torch.iinfo(dtype)
        x = torch.randint(info.min, info.max, (4, 8), generator=g, dtype=torch.int64).to(dtype)
        rows = torch.tensor([functools.reduce(operator.xor, r) for r in x.tolist()], dtype=dtype)
        cols = torch.tensor([functools.reduce(operator.xor, c) for c in zip(*x.tolist())], dtype=dtype)
        want = torch.cat([rows, cols, (x ^ rows[:, None]).flatten(), (x ^ cols[None, :]).flatten()])
        outs = []
        for impl in (slow, fast):
            ops.apply_impl = impl
            out = torch.zeros(4 + 8 + 2 * 32, dtype=dtype)
            _xor_probe[(1,)](x, out, R=4, C=8)
            outs.append(out)
        ops.apply_impl = slow
        if not (torch.equal(outs[0], want) and torch.equal(outs[1], want)):
            raise AssertionError(f"xor_sum under the interpreter: {outs} != {want} ({dtype})")
    ops.apply_impl = fast
    return True


@triton.jit
def _xor_probe(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + tl.arange(0, R), tl.xor_sum(x, 1))
    tl.store(out_ptr + R + tl.arange(0, C), tl.xor_sum(x, 0))
    tl.store(out_ptr + R + C + offs, x ^ tl.xor_sum(x, 1, keep_dims=True))
    tl.store(out_ptr + R + C + R * C + offs, x ^ tl.xor_sum(x, 0, keep_dims=True))


def configs(path: Path) -> list[dict]:
    first = path.read_text().splitlines()[0]
    return json.loads(first.removeprefix("# scripted-configs:"))


def run(name: str, which: list[int] | None = None, extra_shapes: list[dict] = ()) -> dict:
    path = TEMPLATES / f"{name}.py"
    op = operators.get(name)
    report = {"configs": 0, "checks": 0, "failures": []}
    listed = configs(path)
    for i in range(len(listed)) if which is None else which:
        cfg = listed[i]
        mod = load_module(path, f"template_{name}_{i}")
        mod.CONFIG = cfg  # what the scripted policy does by rewriting the CONFIG line
        report["configs"] += 1
        for shape in list(op.shapes["smoke"]) + list(extra_shapes):
            for seed, dist in enumerate(operators.DISTRIBUTIONS):
                inputs = op.make_inputs(shape, seed, "cpu", dist)
                try:
                    j = op.verify(mod.kernel(*inputs), inputs)
                    ok, msg = j.ok, j.message
                except Exception as e:  # a crash is a failure to report, not to hide
                    ok, msg = False, f"{type(e).__name__}: {e}"[:300]
                report["checks"] += 1
                if not ok:
                    report["failures"].append(f"config {cfg} shape {shape} dist {dist}: {msg}")
    return report


if __name__ == "__main__":
    fast_xor_sum()
    if sys.argv[1] == "--plan":
        plan = json.loads(sys.argv[2])
        print(json.dumps({name: run(name, p.get("configs"), p.get("shapes", [])) for name, p in plan.items()}))
    else:
        print(json.dumps({name: run(name) for name in sys.argv[1:]}))
