"""Correctness checks: (outputs, expected) -> (ok, max_err, message).

`allclose` is the default every operator gets; `scaled_allclose` and `topk_check` are the
operator-specific `check`s for contractions and for top-k's tie-ambiguous indices. A `check`
may be handed a reference computed in higher precision (float64 from upcast inputs): it compares
values with the expected outputs, and takes the contract's dtype from the outputs and inputs.
"""
from __future__ import annotations

from typing import Any

import torch

from operators._operator import CheckResult


def _as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _structure(outputs: Any, expected: Any, dtypes: bool = True) -> tuple[tuple, tuple, str]:
    """Pair outputs with expected outputs; a non-empty message says why they cannot be paired.
    dtypes=False: the expected outputs may be wider (an upcast reference)."""
    outs, exps = _as_tuple(outputs), _as_tuple(expected)
    if len(outs) != len(exps):
        return outs, exps, f"expected {len(exps)} output(s), got {len(outs)}"
    for i, (o, e) in enumerate(zip(outs, exps)):
        if not isinstance(e, torch.Tensor):  # a Python scalar output (FlashInfer definitions)
            continue
        if not isinstance(o, torch.Tensor):
            return outs, exps, f"output {i}: expected a tensor, got {type(o).__name__}"
        if tuple(o.shape) != tuple(e.shape):
            return outs, exps, f"output {i}: shape {tuple(o.shape)} != expected {tuple(e.shape)}"
        if o.dtype != e.dtype and (dtypes or o.is_floating_point() != e.is_floating_point()):
            return outs, exps, f"output {i}: dtype {o.dtype} != expected {e.dtype}"
    return outs, exps, ""


def _compare(o: Any, e: Any, atol: float, rtol: float, i: int) -> CheckResult:
    e = torch.as_tensor(e)
    o = torch.as_tensor(o, device=e.device)
    wide = torch.float64 if e.dtype == torch.float64 else torch.float32  # holds bf16/fp16 exactly
    if e.is_complex() or o.is_complex():
        return False, float("inf"), f"output {i}: complex outputs are not supported"
    of, ef = o.to(e.device, wide), e.to(wide)
    close = torch.isclose(of, ef, atol=atol, rtol=rtol, equal_nan=True)
    diff = (of - ef).abs()
    finite = torch.isfinite(diff)
    max_err = float(diff[finite].max()) if bool(finite.any()) else 0.0
    bad = int((~close).sum())
    if bad:
        where = int((~close).flatten().nonzero()[0])
        msg = (f"output {i}: {bad} of {close.numel()} elements outside atol={atol:g} rtol={rtol:g} "
               f"(max abs err {max_err:.4g}; first at flat index {where}: "
               f"got {float(of.flatten()[where]):.6g}, expected {float(ef.flatten()[where]):.6g})")
        return False, max_err if bool(finite.all()) else float("inf"), msg
    return True, max_err, ""


def allclose(outputs: Any, expected: Any, atol: float, rtol: float) -> CheckResult:
    """Every output has the expected shape and dtype and is close elementwise (NaN where NaN)."""
    outs, exps, why = _structure(outputs, expected)
    if why:
        return False, float("inf"), why
    worst = 0.0
    for i, (o, e) in enumerate(zip(outs, exps)):
        ok, err, msg = _compare(o, e, atol, rtol, i)
        if not ok:
            return False, err, msg
        worst = max(worst, err)
    return True, worst, ""


def scaled_allclose(tolerance: dict[str, tuple[float, float]]):
    """allclose whose atol is relative to the RMS of the expected output (at least 1).

    For contractions (GEMM, attention): the rounding of a correct fp32-accumulated result grows
    with the magnitude of the operands, so a fixed atol fails correct kernels on the 'large'
    distribution and an atol wide enough for it lets coarse kernels pass on 'normal'.
    """

    def check(outputs: Any, expected: Any, inputs: tuple) -> CheckResult:
        outs, exps, why = _structure(outputs, expected, dtypes=False)
        if why:
            return False, float("inf"), why
        worst = 0.0
        for i, (o, e) in enumerate(zip(outs, exps)):
            key = str(o.dtype).removeprefix("torch.")  # the contract's dtype: the reference may be wider
            if key not in tolerance:
                return False, float("inf"), f"output {i}: no tolerance for dtype {key}"
            atol, rtol = tolerance[key]
            ef = e.float()
            finite = ef[torch.isfinite(ef)]
            rms = float(finite.pow(2).mean().sqrt()) if finite.numel() else 0.0
            ok, err, msg = _compare(o, e, atol * max(rms, 1.0), rtol, i)
            if not ok:
                return False, err, msg
            worst = max(worst, err)
        return True, worst, ""

    return check


def topk_check(outputs: Any, expected: Any, inputs: tuple) -> CheckResult:
    """Top-k: values exactly the expected sorted values; indices valid, distinct per row, and
    pointing at those values. Ties make the indices ambiguous, so they are not compared."""
    x, k = inputs[0], inputs[1]
    outs = _as_tuple(outputs)
    if len(outs) != 2 or not all(isinstance(t, torch.Tensor) for t in outs):
        return False, float("inf"), "expected a tuple (values, indices) of two tensors"
    values, indices = outs
    want = (x.shape[0], k)
    if tuple(values.shape) != want or tuple(indices.shape) != want:
        return False, float("inf"), f"values/indices shapes {tuple(values.shape)}/{tuple(indices.shape)} != {want}"
    if values.dtype != x.dtype or indices.dtype != torch.int64:
        return False, float("inf"), f"dtypes {values.dtype}/{indices.dtype}; expected {x.dtype}/torch.int64"
    # Selected values are exact copies of inputs, so they compare exactly even with a wider reference.
    exp_values = _as_tuple(expected)[0].to(x.device, torch.float64)
    values, indices = values.to(x.device), indices.to(x.device)
    diff = (values.double() - exp_values).abs()
    max_err = float(diff.max()) if diff.numel() else 0.0
    if not torch.equal(values.double(), exp_values):
        return False, max_err, "values differ from the k largest of each row in descending order"
    if bool(((indices < 0) | (indices >= x.shape[1])).any()):
        return False, max_err, f"indices outside [0, {x.shape[1]})"
    if k > 1 and bool((indices.sort(dim=1).values.diff(dim=1) == 0).any()):
        return False, max_err, "an index repeats within a row"
    if not torch.equal(x.gather(1, indices).double(), values.double()):
        return False, max_err, "x at the returned indices differs from the returned values"
    return True, max_err, ""
