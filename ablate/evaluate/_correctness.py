"""Correctness, in the judge: what the contract's outputs are, the references (float64 on upcast
inputs, kept in float32: their rounding is far below any tolerance), and the comparison of a
candidate's outputs with them under the operator's rule. NaN never passes where the reference
is finite."""
from __future__ import annotations

import math

import torch

_Tensor = torch.Tensor


def upcast(inputs) -> tuple:
    """Floating inputs in float64, for the reference."""
    return tuple(t.double() if isinstance(t, _Tensor) and t.is_floating_point() else t for t in inputs)


def as_outputs(out) -> list:
    return [out] if isinstance(out, _Tensor) else list(out)


def expected(op, ins) -> list[tuple[list[int] | None, str | None]]:
    """Output shapes and dtypes of the contract: the reference on the original dtypes."""
    return [(list(t.shape), str(t.dtype).removeprefix("torch.")) if isinstance(t, _Tensor) else (None, None)
            for t in as_outputs(op.reference(*ins))]


def references(op, ins) -> list:
    outs = as_outputs(op.reference(*upcast(ins)))
    return [t.float() if isinstance(t, _Tensor) and t.is_floating_point() else t for t in outs]


def output_bytes(exp) -> int:
    return sum(math.prod(shape) * torch.empty((), dtype=getattr(torch, dtype)).element_size()
               for shape, dtype in exp if shape is not None)


def tolerance(op, dtype: str) -> tuple[float, float]:
    if dtype in op.tolerance:
        return op.tolerance[dtype]
    if dtype.startswith(("int", "uint", "bool")):
        return (0.0, 0.0)
    raise RuntimeError(f"operator {op.name!r} gives no tolerance for {dtype}")


def compare(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> tuple[bool, float, str | None]:
    """Full-output check |out - ref| <= atol + rtol*|ref|, with NaN never passing.
    Returns (ok, max_abs_error, message)."""
    o = out.to(torch.float64)
    r = ref.to(o.device, torch.float64)
    diff = (o - r).abs()
    bad = ~(diff <= atol + rtol * r.abs())  # NaN compares False, so it is bad
    max_err = float(diff.max()) if diff.numel() else 0.0
    nbad = int(bad.sum())
    if not nbad:
        return True, max_err, None
    idx = tuple(int(i) for i in torch.nonzero(bad)[0])
    nan = int(torch.isnan(o).sum())
    msg = (f"{nbad:,} of {o.numel():,} elements outside atol={atol:g} rtol={rtol:g}"
           f"{f' ({nan:,} NaN)' if nan else ''}; first at {list(idx)}: got {float(o[idx]):.6g}, "
           f"expected {float(r[idx]):.6g}")
    return False, max_err, msg


def check(op, outs: list, refs: list, ins, exp) -> tuple[dict[str, str], float | None]:
    """Failures {reason: message} of one input set's outputs, and the max abs error."""
    if not isinstance(outs, list) or len(outs) != len(exp):
        return {"wrong_shape": f"{len(outs) if isinstance(outs, list) else '?'} outputs, expected {len(exp)}"}, None
    fails: dict[str, str] = {}
    for t, (shape, dtype) in zip(outs, exp):
        if shape is None or not isinstance(t, _Tensor):
            continue
        if list(t.shape) != shape:
            fails.setdefault("wrong_shape", f"output shape {list(t.shape)}, expected {shape}")
        elif str(t.dtype).removeprefix("torch.") != dtype:
            fails.setdefault("wrong_dtype", f"output dtype {str(t.dtype).removeprefix('torch.')}, expected {dtype}")
    if fails:
        return fails, None
    if op.check is not None:  # the operator's own rule (top-k ties, scaled tolerances)
        got = outs[0] if len(outs) == 1 else tuple(outs)
        ok, err, msg = op.check(got, refs[0] if len(refs) == 1 else tuple(refs), ins)
        return ({} if ok else {"incorrect": msg}), float(err)
    worst = 0.0
    for t, (shape, dtype), ref in zip(outs, exp, refs):
        if shape is None:  # a Python scalar output (FlashInfer definitions)
            t, ref = torch.as_tensor(t, dtype=torch.float64), torch.as_tensor(ref)
            dtype = "float32" if "float32" in op.tolerance else next(iter(op.tolerance))
        elif not isinstance(t, _Tensor):
            fails.setdefault("output_not_dense", f"a {type(t).__name__} where a tensor is expected")
            continue
        ok, err, msg = compare(t, ref, *tolerance(op, dtype))
        worst = err if math.isnan(err) or math.isnan(worst) else max(worst, err)
        if not ok:
            fails.setdefault("incorrect", msg)
    return fails, worst
