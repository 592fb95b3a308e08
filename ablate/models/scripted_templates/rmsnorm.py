# scripted-configs: [{"num_warps": 4, "rows_per_program": 1}, {"num_warps": 8, "rows_per_program": 1}, {"num_warps": 16, "rows_per_program": 1}, {"num_warps": 2, "rows_per_program": 1}, {"num_warps": 8, "rows_per_program": 2}, {"num_warps": 4, "rows_per_program": 4}, {"num_warps": 16, "rows_per_program": 4}]
"""RMSNorm in Triton: one program normalises a [rows_per_program, N] tile, each row whole in
registers (read once, written once), the sum of squares in float32. A row whose width is not a
power of two is held in up to PIECES power-of-two pieces (5120 = 4096 + 1024) rather than one
block padded to the next power of two, so masked lanes do not take registers. Whatever the
configuration, a program gets at least one warp per 1024 elements of its tile (at most 32 values
a thread), so rows wider than the ones it was tuned on do not spill registers."""
import torch
import triton
import triton.language as tl

CONFIG = {"num_warps": 4, "rows_per_program": 1}
SHAPE_CONFIGS = {}  # "M=..,N=..": a configuration measured faster on that shape
WARP_COLS = 1024  # at most this many columns of a tile per warp: 32 values a thread
PIECES = 3  # at most this many power-of-two pieces a row; 1: one block, padded
MIN_PIECE = 256  # a remainder narrower than this is not split further: one padded piece
EPS = 1e-6


def row_pieces(n: int) -> tuple[int, int, int]:
    """Power-of-two widths covering n columns: whole pieces, largest first, then the rest padded."""
    pieces, left = [], n
    while len(pieces) < PIECES - 1 and left >= MIN_PIECE and left & (left - 1):
        pieces.append(1 << (left.bit_length() - 1))
        left -= pieces[-1]
    pieces.append(triton.next_power_of_2(left))
    return tuple(pieces + [0] * (3 - len(pieces)))


@triton.jit
def _piece(x_ptr, offs, rows_ok, start, N, B: tl.constexpr):
    cols = start + tl.arange(0, B)
    mask = rows_ok[:, None] & (cols < N)[None, :]
    x = tl.load(x_ptr + offs + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
    return x.to(tl.float32), cols, mask


@triton.jit
def _store(y_ptr, w_ptr, offs, x, rstd, cols, mask, N):
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0, eviction_policy="evict_last").to(tl.float32)
    tl.store(y_ptr + offs + cols[None, :], (x * rstd[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_rows(x_ptr, w_ptr, y_ptr, M, N, stride, eps, ROWS: tl.constexpr,
                  B0: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rows_ok = rows < M
    offs = rows[:, None].to(tl.int64) * stride
    x0, c0, m0 = _piece(x_ptr, offs, rows_ok, 0, N, B0)
    ss = tl.sum(x0 * x0, axis=1)
    if B1 > 0:
        x1, c1, m1 = _piece(x_ptr, offs, rows_ok, B0, N, B1)
        ss += tl.sum(x1 * x1, axis=1)
    if B2 > 0:
        x2, c2, m2 = _piece(x_ptr, offs, rows_ok, B0 + B1, N, B2)
        ss += tl.sum(x2 * x2, axis=1)
    rstd = tl.rsqrt(ss / N + eps)
    _store(y_ptr, w_ptr, offs, x0, rstd, c0, m0, N)
    if B1 > 0:
        _store(y_ptr, w_ptr, offs, x1, rstd, c1, m1, N)
    if B2 > 0:
        _store(y_ptr, w_ptr, offs, x2, rstd, c2, m2, N)


def kernel(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    x, weight = x.contiguous(), weight.contiguous()
    M, N = x.shape
    cfg = SHAPE_CONFIGS.get(f"M={M},N={N}", CONFIG)
    y = torch.empty_like(x)
    pieces = row_pieces(N)
    rows = min(cfg["rows_per_program"], triton.next_power_of_2(M))
    warps = min(32, max(cfg["num_warps"], triton.next_power_of_2(rows * sum(pieces) // WARP_COLS)))
    _rmsnorm_rows[(triton.cdiv(M, rows),)](x, weight, y, M, N, x.stride(0), EPS, ROWS=rows, B0=pieces[0],
                                           B1=pieces[1], B2=pieces[2], num_warps=warps)
    return y
