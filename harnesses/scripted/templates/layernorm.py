# scripted-configs: [{"num_warps": 4, "rows_per_program": 1, "chunk": 0}, {"num_warps": 8, "rows_per_program": 1, "chunk": 0}, {"num_warps": 16, "rows_per_program": 1, "chunk": 0}, {"num_warps": 8, "rows_per_program": 2, "chunk": 0}, {"num_warps": 2, "rows_per_program": 1, "chunk": 0}, {"num_warps": 4, "rows_per_program": 4, "chunk": 0}, {"num_warps": 16, "rows_per_program": 2, "chunk": 0}, {"num_warps": 4, "rows_per_program": 1, "chunk": 1024}, {"num_warps": 4, "rows_per_program": 1, "chunk": 2048}, {"num_warps": 8, "rows_per_program": 1, "chunk": 2048}]
"""LayerNorm in Triton: one program normalises a [rows_per_program, N] tile, each row whole in
registers (read once, written once); mean, then the variance around it (two passes over
registers, not E[x^2] - E[x]^2), in float32. A program gets at least one warp per 1024 elements
of its tile, so rows wider than the ones it was tuned on do not spill the four row-long arrays.
chunk > 0 (rows wider than it): a program loops over its row in chunks of that many columns,
twice: the statistics, then the output, the second read from L2 (the first asks L2 to keep the
row). Each chunk's mean and squared deviations are exact within the chunk, and chunks combine by
Chan's formula, so the variance is never E[x^2] - E[x]^2. Far fewer registers a thread, so an SM
holds more rows in flight: on the H200 the whole-row kernel held three programs an SM (37.5%
occupancy, bound by registers) and reached 51-76% of DRAM bandwidth where torch.compile's chunked
loop reached 58-84% (benchmarks/results/h200-counters).
Rows wider than LOOP_ABOVE columns are looped over in chunks of LOOP_CHUNK columns at LOOP_WARPS
warps under a configuration that holds rows whole: on the H200, at widths no eval shape has
(4608, 6144, 8192, 12288; benchmarks/results/h200-chunks), that chunking was the fastest against
the whole row, 1.069x (worst 0.989x) in geomean, of those within the 2% noise of it at every width; at 1536 and
3072 columns the whole row was as fast or faster.
A chunking is written for rows of CHUNK_REF columns: a row wider by a power of two (or more)
takes chunks as many times larger at the same warps, so that the row takes as many chunks. The
warps stay: each chunk is reduced across the program twice (its mean, then its deviations), and
those reductions synchronise the warps, so fewer, larger chunks at few warps cost less. In the
same runs, chunks of 4096 at 4 warps ran at 1.06x, 1.12x and 1.09x the speed of 2048 at 4 at
8192, 12288 and 14336 columns (4096 at 8 warps: 1.02x, 1.15x and 1.10x). The whole row was
still 1.06x the speed of that at 14336 columns (7/8 of its block): a row close to a power of two
may be better whole."""
import torch
import triton
import triton.language as tl

CONFIG = {"num_warps": 4, "rows_per_program": 1, "chunk": 0}
SHAPE_CONFIGS = {}  # "M=..,N=..": a configuration measured faster on that shape
WARP_COLS = 1024  # at most this many columns of a tile per warp: 32 values a thread
LOOP_ABOVE, LOOP_CHUNK, LOOP_WARPS = 4096, 2048, 4  # under a whole-row configuration, wider rows are looped in chunks
CHUNK_REF = 4096  # the row width a chunking is written for: rows 2^k times wider take chunks 2^k times larger
EPS = 1e-5


@triton.jit
def _layernorm_rows(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    in_row = cols < N
    mask = (rows[:, None] < M) & in_row[None, :]
    offs = rows[:, None].to(tl.int64) * stride + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)
    w = tl.load(w_ptr + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(tl.float32)
    b = tl.load(b_ptr + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(tl.float32)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_chunked(x_ptr, w_ptr, b_ptr, y_ptr, N, stride, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = x_ptr + row * stride, y_ptr + row * stride
    cols = tl.arange(0, CHUNK)
    count, mean, m2 = 0.0, 0.0, 0.0  # of the chunks so far: columns, their mean, squared deviations
    for start in range(0, N, CHUNK):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        n = tl.minimum(N - start, CHUNK).to(tl.float32)
        chunk_mean = tl.sum(x, axis=0) / n
        d = tl.where(mask, x - chunk_mean, 0.0)
        delta = chunk_mean - mean
        total = count + n
        mean = mean + delta * (n / total)
        m2 = m2 + tl.sum(d * d, axis=0) + delta * delta * (count * n / total)
        count = total
    rstd = tl.rsqrt(m2 / N + eps)
    for start in range(0, N, CHUNK):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        b = tl.load(b_ptr + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        tl.store(y_row + start + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def kernel(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
    M, N = x.shape
    cfg = SHAPE_CONFIGS.get(f"M={M},N={N}", CONFIG)
    y = torch.empty_like(x)
    if not cfg["chunk"] and N > LOOP_ABOVE:
        cfg = {**cfg, "chunk": LOOP_CHUNK, "num_warps": LOOP_WARPS}
    chunk = cfg["chunk"] * max(1, (1 << (N.bit_length() - 1)) // CHUNK_REF)
    if 0 < chunk < N:
        warps = min(32, max(cfg["num_warps"], chunk // WARP_COLS))
        _layernorm_chunked[(M,)](x, weight, bias, y, N, x.stride(0), EPS, CHUNK=chunk, num_warps=warps)
        return y
    block = triton.next_power_of_2(N)
    rows = min(cfg["rows_per_program"], triton.next_power_of_2(M))
    warps = min(32, max(cfg["num_warps"], rows * block // WARP_COLS))
    _layernorm_rows[(triton.cdiv(M, rows),)](x, weight, bias, y, M, N, x.stride(0), EPS, ROWS=rows, BLOCK=block,
                                             num_warps=warps)
    return y
