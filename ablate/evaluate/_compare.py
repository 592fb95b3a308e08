"""What an output must be (a plain dense tensor, apart from the inputs) and how close it must be
to the reference."""
from __future__ import annotations

import torch

_Tensor = torch.Tensor  # captured: the exact class outputs must have


_SCALARS = (int, float, bool)


def as_list(out) -> list | None:
    """The outputs as a list of plain tensors (Python numbers allowed beside them in a tuple,
    for references that return one), or None when `out` is anything else."""
    if type(out) is _Tensor:
        return [out]
    if type(out) in (tuple, list) and any(type(t) is _Tensor for t in out) \
            and all(type(t) is _Tensor or type(t) in _SCALARS for t in out):
        return list(out)
    return None


def layout_problem(t: torch.Tensor) -> str | None:
    """Why `t` is not a plain, dense, materialised tensor; None when it is."""
    if t.layout != torch.strided:
        return f"layout {t.layout}"
    if t.is_conj() or t.is_neg():
        return "a lazy conjugate/negative view"
    dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return f"strides {tuple(t.stride())} for shape {tuple(t.shape)} overlap or leave gaps"
        expected *= sz
    return None


def _span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def aliases(outputs: list, inputs) -> bool:
    spans = [_span(t) for t in inputs if isinstance(t, _Tensor) and t.untyped_storage().nbytes()]
    for o in outputs:
        if not isinstance(o, _Tensor):
            continue
        lo, hi = _span(o)
        if hi > lo and any(lo < b and a < hi for a, b in spans):
            return True
    return False


def upcast(inputs) -> tuple:
    """Floating inputs in float64, for the reference."""
    return tuple(t.double() if isinstance(t, _Tensor) and t.is_floating_point() else t for t in inputs)


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
