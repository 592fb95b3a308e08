"""The rule's error pass (_error_stats.chunk_stats) as two Triton kernels: the pass a GPU runs
(_error_stats.gpu_pass). The eager pass launches about 45 kernels over a chunk, each reading and
writing the whole of it; these read the output and the reference once each (the reference twice
where rows are used): on an H100, 3.18 ms against 9.40 for a 16384x4096 check, 1.7-3.1x faster on
13 eval shapes (benchmarks/results/h100-setup-cost).

They repeat the eager pass's arithmetic element by element, in its dtypes: the same differences,
sizes and ratios in the wide dtype, divisions rounded to nearest, the tolerance and the scale cast
to the wide dtype as torch's type promotion casts them, the row RMS and the sum of squares
accumulated in float64. Only the order in which the float64 sums add up differs: on those 13
shapes the counts and maxima came out equal and the sums within 1.3e-16. Part of the one
correctness rule (operators/_correctness.py, its public face).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _row_rms(r_ptr, rms_ptr, row, BLOCK: tl.constexpr):
    """rms[i] = sqrt(mean over row i of |r|^2 in float64), non-finite elements counted as 0, cast
    to r's dtype: _error_stats._size's `rows.double().square().mean(1).sqrt()`."""
    i = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float64)
    for start in range(0, row, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(r_ptr + i * row + offs, mask=offs < row, other=0.0)
        fin = (x == x) & (tl.abs(x) != float("inf"))
        mag = tl.where(fin, tl.abs(x), 0.0).to(tl.float64)
        acc += mag * mag
    ms = tl.sum(acc, axis=0) / row
    tl.store(rms_ptr + i, tl.sqrt(ms).to(rms_ptr.dtype.element_ty))  # float64: rounded to nearest


@triton.jit
def _div(a, b, F32: tl.constexpr):
    """a / b rounded to nearest, as torch divides (Triton's float32 `/` may be approximate)."""
    if F32:
        return tl.math.div_rn(a, b)
    else:
        return a / b


@triton.jit
def _partials(o_ptr, r_ptr, rms_ptr, scale_ptr, tol_ptr, part_ptr, n, row, ROWS: tl.constexpr,
              F32: tl.constexpr, BLOCK: tl.constexpr):
    """One block's (nonfinite, max d, sum (d / scale)^2, max e, count e > tol, count e is NaN)."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    o = tl.load(o_ptr + offs, mask=m, other=0.0)
    r = tl.load(r_ptr + offs, mask=m, other=0.0)
    scale = tl.load(scale_ptr)
    tol = tl.load(tol_ptr)
    inf = float("inf")
    fr = (r == r) & (tl.abs(r) != inf)
    fo = (o == o) & (tl.abs(o) != inf)
    unmatched = (~fr) & (o != r) & ~((o != o) & (r != r))  # Inf where Inf, NaN where NaN
    bad = ((fr & ~fo) | unmatched) & m
    d = tl.where(fr & fo, tl.abs(o - r), 0.0)
    mag = tl.where(fr, tl.abs(r), 0.0)
    if ROWS:
        size = mag + tl.maximum(tl.load(rms_ptr + offs // row, mask=m, other=0.0), scale)
    else:
        size = mag + scale
    e = _div(d, size, F32)
    q = _div(d, scale, F32).to(tl.float64)
    e_nan = (e != e) & m
    e_num = tl.where(m & ~e_nan, e, 0.0)
    base = part_ptr + pid * 6
    tl.store(base + 0, tl.sum(bad.to(tl.float64), axis=0))
    tl.store(base + 1, tl.max(tl.where(m, d, 0.0), axis=0).to(tl.float64))
    tl.store(base + 2, tl.sum(tl.where(m, q * q, 0.0), axis=0))
    tl.store(base + 3, tl.max(e_num, axis=0).to(tl.float64))
    tl.store(base + 4, tl.sum(((e_num > tol) & m).to(tl.float64), axis=0))
    tl.store(base + 5, tl.sum(e_nan.to(tl.float64), axis=0))


def chunk_stats(oc: torch.Tensor, rc: torch.Tensor, scale: torch.Tensor, tol: torch.Tensor,
                row: int) -> torch.Tensor:
    """_error_stats.chunk_stats's result (float64: nonfinite, max_abs, sum of (d / scale)^2, max e,
    elements beyond tol) from the two kernels. oc and rc: flat, contiguous, the wide dtype."""
    oc, rc = oc.contiguous(), rc.contiguous()
    n = rc.numel()
    wide = rc.dtype
    scale_w = scale.to(wide).reshape(1)  # as torch promotes: the 0-d float64 takes the wide dtype
    tol_w = tol.to(wide).reshape(1)
    rms = torch.empty(n // row if row else 1, dtype=wide, device=rc.device)
    if row:
        _row_rms[(n // row,)](rc, rms, row, BLOCK=BLOCK)
    blocks = triton.cdiv(n, BLOCK)
    part = torch.empty((blocks, 6), dtype=torch.float64, device=rc.device)
    _partials[(blocks,)](oc, rc, rms, scale_w, tol_w, part, n, max(row, 1), ROWS=bool(row),
                          F32=wide == torch.float32, BLOCK=BLOCK)
    # a NaN ratio anywhere: NaN, as torch's max gives (decided on the device: no wait for it here)
    emax = torch.where(part[:, 5].sum() > 0, float("nan"), part[:, 3].max())
    return torch.stack([part[:, 0].sum(), part[:, 1].max(), part[:, 2].sum(), emax, part[:, 4].sum()])
