"""Error statistics of one output against the reference computed in float64 from upcast inputs
(kept in float32, as the judge keeps it), in a few fused reductions over chunks (memory stays
bounded on any problem size):

    scale     RMS of the reference (its finite elements): the output's size
    rms       RMS(out - ref) / scale                   catches a bias, a wrong epsilon or scale
    max       max |out - ref| / (|ref| + size)         catches a stale row, a broken tail block
    frac      fraction of elements whose max-ratio exceeds the operator's tolerance `tol`

where an element's `size` is the larger of `scale` and the RMS of its row (the last dimension)
in the reference. An element's rounding error follows the size of the values it is computed
from, and where rows differ in size the row tells it better than the whole output: causal
attention over tiny_rows inputs has short rows averaging a few large values beside long ones
averaging to near zero, so the output's RMS is small, and a near-zero element of a short row
shows a bf16 P's rounding at many times `tol`: on an H200, FlashAttention, cuDNN and a
flash-style Triton kernel reached 2.4-6.3 tol against the output's RMS (which rejected the
Triton kernel beside libraries that drew 2.4), 0.9-2.0 tol against their rows'. A stale row or
a broken tail block is still off by about its row's own size.
    nonfinite NaN or Inf where the reference is finite (or a non-finite reference not matched):
              never allowed, whatever the envelope

Part of the one correctness rule (operators/_correctness.py, its public face).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

CHUNK = 1 << 22  # elements per pass on a CPU (bounded memory whatever the output's size), and the longest row
# GPU: a pass's ~45 kernels cost about 0.7 ms whatever its size, so larger passes: a 268M-element check's
# statistics in 38 ms rather than 82 on an H100 (benchmarks/results/h100-check-cost)
GPU_CHUNK = 1 << 26
PASS_BYTES = 64  # a pass's temporaries an element, with room (about 32 measured: 2 GB for 64M elements)


def _chunk(t: torch.Tensor) -> int:
    """Elements per pass on t's device. On a GPU, never more than the free memory holds: a device
    nearly filled by the problem (and the candidate shares it) costs the judge smaller passes, not an
    out-of-memory verdict; the statistics differ only in summation order."""
    if t.device.type != "cuda":
        return CHUNK
    free, _ = torch.cuda.mem_get_info(t.device)
    return max(CHUNK, min(GPU_CHUNK, free // PASS_BYTES))


@dataclass(frozen=True)
class Stats:
    """Error statistics of one output against the float64 reference (see the module docstring)."""

    n: int = 0
    nonfinite: int = 0
    scale: float = 1.0
    max_abs: float = 0.0
    rms: float = 0.0
    max: float = 0.0
    frac: float = 0.0
    problem: str = ""  # an operator rule's violation (a repeated top-k index): never passes

    def as_dict(self) -> dict:
        return asdict(self)



def _flat(t: Any) -> torch.Tensor:
    t = torch.as_tensor(t)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.reshape(-1)


def _wide(*ts: torch.Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype in (torch.float64, torch.int64, torch.int32) for t in ts) else torch.float32


def _scale(r: torch.Tensor, wide: torch.dtype, chunk: int) -> float:
    """RMS of the finite elements of a flat reference; 1 when all are zero (errors then absolute)."""
    acc = torch.zeros(2, dtype=torch.float64, device=r.device)
    for a in range(0, r.numel(), chunk):
        rc = r[a:a + chunk].to(wide)
        fin = torch.isfinite(rc)
        acc[0] += torch.where(fin, rc, 0).double().square().sum()
        acc[1] += fin.sum()
    sq, cnt = acc.tolist()
    return math.sqrt(sq / cnt) if cnt and sq > 0 else 1.0


def _rows(ref: Any, chunk: int) -> tuple[int, int]:
    """(elements per row, elements per pass of about `chunk`) of a reference: rows are its last
    dimension when it has several of them, each no longer than CHUNK (0 otherwise: the output's
    scale alone), and a pass holds whole rows."""
    shape = tuple(torch.as_tensor(ref).shape)
    row = shape[-1] if len(shape) >= 2 and 1 < shape[-1] <= CHUNK and math.prod(shape) > shape[-1] else 0
    return row, (max(chunk // row, 1) * row if row else chunk)


def _size(rc: torch.Tensor, finite: torch.Tensor, scale, row: int) -> torch.Tensor:
    """Each element's |ref| + size, the max statistic's denominator (see the module docstring).
    scale: a float or a 0-d tensor."""
    scale = torch.as_tensor(scale, dtype=rc.dtype, device=rc.device)
    mag = torch.where(finite, rc.abs(), 0)
    if not row:
        return mag + scale
    rows = mag.view(-1, row)
    rms = rows.double().square().mean(1, keepdim=True).sqrt().to(mag.dtype)
    return (rows + torch.maximum(rms, scale)).view(-1)


def chunk_stats(oc: torch.Tensor, rc: torch.Tensor, scale: torch.Tensor, tol: torch.Tensor,
                row: int) -> torch.Tensor:
    """One pass's partial statistics, float64: (nonfinite, max_abs, sum of (d / scale)^2, max e,
    elements beyond tol), of an output's chunk `oc` against the reference's `rc`, both in the wide
    dtype. A function of tensors only, so it can be handed to torch.compile unchanged
    (benchmarks/check_cost.py measures that)."""
    fr, fo = torch.isfinite(rc), torch.isfinite(oc)
    unmatched = ~fr & (oc != rc) & ~(torch.isnan(oc) & torch.isnan(rc))  # Inf where Inf, NaN where NaN
    d = torch.where(fr & fo, (oc - rc).abs(), 0)
    e = d / _size(rc, fr, scale, row)
    return torch.stack([((fr & ~fo) | unmatched).sum().double(), d.max().double(),
                        (d / scale.to(d.dtype)).double().square().sum(), e.max().double(),
                        (e > tol).sum().double()])


# A GPU's pass: the two Triton kernels of _fused_stats, checked against the eager pass on the first
# chunk of each kind (wide dtype, rows or not) a process sees; one that raises or disagrees there is
# given up for the eager pass, for that kind and the process's life, and said in GAVE_UP (the judge
# flags its result `error_pass_eager`): a wrong statistic cannot come of it, only a slower pass.
CHECKED: dict[tuple, bool] = {}  # (wide dtype, rows) -> the Triton pass agreed with the eager one
GAVE_UP: dict[str, str] = {}  # kind -> why the eager pass runs for it instead


def agree(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two passes' partials the same: counts and maxima equal (NaN as NaN), the sum of squares to
    1e-12 of itself (the float64 sums' order is all that may differ)."""
    x, y = a.tolist(), b.tolist()
    same = all(u == v or (math.isnan(u) and math.isnan(v)) for i, (u, v) in enumerate(zip(x, y)) if i != 2)
    return same and abs(x[2] - y[2]) <= 1e-12 * max(abs(x[2]), abs(y[2]))


def gpu_pass(oc: torch.Tensor, rc: torch.Tensor, scale: torch.Tensor, tol: torch.Tensor, row: int) -> torch.Tensor:
    """chunk_stats's partials from the Triton pass (_fused_stats), checked as CHECKED says."""
    kind = (str(rc.dtype).removeprefix("torch."), bool(row))
    if CHECKED.get(kind) is False:
        return chunk_stats(oc, rc, scale, tol, row)
    try:
        from ablate.operators import _fused_stats

        got = _fused_stats.chunk_stats(oc, rc, scale, tol, row)
    except Exception as e:  # noqa: BLE001 (a GPU or a Triton it cannot compile for: the eager pass)
        return _give_up(kind, f"the Triton pass raised {type(e).__name__}: {e}"[:300], oc, rc, scale, tol, row)
    if kind not in CHECKED:
        want = chunk_stats(oc, rc, scale, tol, row)
        CHECKED[kind] = agree(got, want)
        if not CHECKED[kind]:
            return _give_up(kind, f"the Triton pass gave {got.tolist()}, the eager {want.tolist()}", oc, rc, scale, tol,
                            row)
    return got


def _give_up(kind: tuple, why: str, *chunk) -> torch.Tensor:
    """The eager pass's partials of `chunk`, the Triton pass given up for `kind` (said in GAVE_UP)."""
    CHECKED[kind] = False
    GAVE_UP[f"{kind[0]}{' rows' if kind[1] else ''}"] = why
    return chunk_stats(*chunk)


PASS = None  # what error_stats runs on each chunk: None, by the device (a benchmark may swap one in)


def error_stats(out: Any, ref: Any, tol: float) -> Stats:
    """Statistics of one output (a tensor or number) against the float64 reference's."""
    o, r = _flat(out), _flat(ref)
    if o.numel() != r.numel():
        raise ValueError(f"{o.numel()} elements against a reference of {r.numel()}")
    n = r.numel()
    if n == 0:
        return Stats()
    wide, chunk = _wide(o, r), _chunk(r)  # one pass size for the whole output
    scale = _scale(r, wide, chunk)
    row, step = _rows(ref, chunk)
    scale_t = torch.tensor(scale, dtype=torch.float64, device=r.device)
    tol_t = torch.tensor(tol, dtype=torch.float64, device=r.device)
    part = torch.zeros(5, dtype=torch.float64, device=r.device)  # nonfinite, max_abs, sum q^2, max e, beyond
    run = PASS or (gpu_pass if r.device.type == "cuda" else chunk_stats)
    for a in range(0, n, step):
        p = run(o[a:a + step].to(device=r.device, dtype=wide), r[a:a + step].to(wide), scale_t, tol_t, row)
        part = torch.stack([part[0] + p[0], torch.maximum(part[1], p[1]), part[2] + p[2],
                            torch.maximum(part[3], p[3]), part[4] + p[4]])
    nonfinite, max_abs, sumsq, emax, beyond = part.tolist()
    return Stats(n=n, nonfinite=int(nonfinite), scale=scale, max_abs=max_abs, rms=math.sqrt(sumsq / n),
                 max=emax, frac=beyond / n)


def worst_element(out: Any, ref: Any) -> tuple[list[int], float, float]:
    """(index, got, expected) of the element farthest off relative to |ref| + size; a NaN or
    Inf where the reference is finite counts as farthest."""
    of, rf = _flat(out), _flat(ref)
    wide = _wide(of, rf)
    chunk = _chunk(rf)
    scale = _scale(rf, wide, chunk)
    row, step = _rows(ref, chunk)
    best, where = -1.0, 0
    for a in range(0, rf.numel(), step):
        rc = rf[a:a + step].to(wide)
        oc = of[a:a + step].to(device=rf.device, dtype=wide)
        e = ((oc - rc).abs() / _size(rc, torch.isfinite(rc), scale, row)).nan_to_num(nan=math.inf, posinf=math.inf)
        matched = (oc == rc) | (torch.isnan(oc) & torch.isnan(rc))  # a non-finite reference met exactly
        e = torch.where(~torch.isfinite(rc) & matched, 0, e)
        v, i = e.max(0)
        if float(v) > best:
            best, where = float(v), a + int(i)
    shape = tuple(torch.as_tensor(ref).shape)
    idx = [int(i) for i in torch.unravel_index(torch.tensor(where), shape)] if shape else []
    return idx, float(of[where]), float(rf[where])


__all__ = ["CHUNK", "GPU_CHUNK", "Stats", "chunk_stats", "error_stats", "worst_element"]
