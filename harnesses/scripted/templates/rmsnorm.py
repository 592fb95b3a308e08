# scripted-configs: [{"num_warps": 4, "rows_per_program": 1, "chunk": 0}, {"num_warps": 8, "rows_per_program": 1, "chunk": 0}, {"num_warps": 16, "rows_per_program": 1, "chunk": 0}, {"num_warps": 2, "rows_per_program": 1, "chunk": 0}, {"num_warps": 8, "rows_per_program": 2, "chunk": 0}, {"num_warps": 4, "rows_per_program": 4, "chunk": 0}, {"num_warps": 16, "rows_per_program": 4, "chunk": 0}, {"num_warps": 4, "rows_per_program": 1, "chunk": 1024}, {"num_warps": 4, "rows_per_program": 1, "chunk": 2048}, {"num_warps": 8, "rows_per_program": 1, "chunk": 2048}]
"""RMSNorm in Triton: one program normalises a [rows_per_program, N] tile, each row whole in
registers (read once, written once), the sum of squares in float32. Whatever the configuration,
a program gets at least one warp per 1024 elements of its tile (at most 32 values a thread), so
rows wider than the ones it was tuned on do not spill registers.
The row is held as it was loaded (bf16, widened only for the output), the weights are loaded
after the reduction, and the row's width is a compile-time constant, so the lanes past its end
take no registers: compiled for sm_90 at 6144 columns and 8 warps, 38 registers a thread where the
float32 kernel took 64. On the H200 at widths no eval shape has, side by side
(benchmarks/results/h200-lean, rows-1): 4608 columns 0.0413 ms against 0.0506 (4 warps), 6144
0.0551 against 0.0588 (8 warps); at 3072 and 7680 within 1.3% at 8 warps.
chunk > 0 (rows wider than it): a program loops over its row in chunks of that many columns,
twice: the sum of squares, then the output, the second read from L2 (the first asks L2 to keep
the row). Far fewer registers a thread, so an SM holds more rows in flight.
Rows wider than LOOP_ABOVE columns are looped over in chunks of LOOP_CHUNK columns at LOOP_WARPS
warps under a configuration that holds rows whole: on the H200, at widths no eval shape has
(4608, 6144, 8192, 12288; benchmarks/results/h200-chunks), that chunking was the fastest against
the float32 whole row, 1.057x (worst 1.006x) in geomean; at 1536 and 3072 columns the whole row
was as fast or faster.
But a row up to WHOLE_MAX columns whose last chunk would hold half a chunk or less is held whole,
however configured: the loop spends a whole round trip, to memory and again to L2, on that last
chunk. Against chunks of 2048 at 8 warps (h200-lean, rows-2): 3072 columns 0.0536 ms against
0.0573, 4608 0.0426 against 0.0463, 6656 0.0596 against 0.0599; where the last chunk is fuller
the chunks were as fast or faster (3584: 0.0611 against 0.0626 whole, 5632 0.0522 against
0.0520, 7680 0.0659 against 0.0683).
A chunking is written for rows of CHUNK_REF columns: a row wider by a power of two (or more)
takes chunks and warps as many times larger, so that each thread loads as many values a chunk
(8 under chunks of 2048 at 8 warps: one 16-byte load) and the row takes as many chunks. The loop
reduces nothing until its end (the squares add up lane by lane), so more warps cost it no
synchronisation. In the same runs, chunks of 4096 at 16 warps were the fastest of all chunkings
at 8192, 12288 and 14336 columns: 1.04x, 1.02x and 1.09x the speed of 2048 at 8."""
import torch
import triton
import triton.language as tl

CONFIG = {"num_warps": 4, "rows_per_program": 1, "chunk": 0}
SHAPE_CONFIGS = {}  # "M=..,N=..": a configuration measured faster on that shape
WARP_COLS = 1024  # at most this many columns of a tile per warp: 32 values a thread
LOOP_ABOVE, LOOP_CHUNK, LOOP_WARPS = 4096, 2048, 8  # under a whole-row configuration, wider rows are looped in chunks
CHUNK_REF = 4096  # the row width a chunking is written for: rows 2^k times wider scale it by 2^k
WHOLE_MAX = 8192  # a row up to this wide whose last chunk would be half empty or less is held whole, however configured
EPS = 1e-6


@triton.jit
def _rmsnorm_rows(x_ptr, w_ptr, y_ptr, M, N: tl.constexpr, stride, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # N is a compile-time constant: the lanes past the row's end are known dead and take no registers
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    in_row = cols < N
    mask = (rows[:, None] < M) & in_row[None, :]
    offs = rows[:, None].to(tl.int64) * stride + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_first")  # held as loaded
    squares = x.to(tl.float32) * x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(squares, axis=1) / N + eps)
    # the weights only after the reduction, so they are not live across it
    w = tl.load(w_ptr + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(tl.float32)
    if x.dtype == tl.bfloat16:
        # widened by hand, not with .to(): the same expression as above would be merged with it and
        # the row kept live in float32 over the reduction (twice the registers)
        wide = (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        wide = x.to(tl.float32)
    tl.store(y_ptr + offs, (wide * rstd[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_chunked(x_ptr, w_ptr, y_ptr, N, stride, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = x_ptr + row * stride, y_ptr + row * stride
    cols = tl.arange(0, CHUNK)
    squares = tl.zeros([CHUNK], tl.float32)
    for start in range(0, N, CHUNK):
        x = tl.load(x_row + start + cols, mask=start + cols < N, other=0.0, eviction_policy="evict_last")
        squares += x.to(tl.float32) * x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(squares, axis=0) / N + eps)
    for start in range(0, N, CHUNK):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        tl.store(y_row + start + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def kernel(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    x, weight = x.contiguous(), weight.contiguous()
    M, N = x.shape
    cfg = SHAPE_CONFIGS.get(f"M={M},N={N}", CONFIG)
    y = torch.empty_like(x)
    if not cfg["chunk"] and N > LOOP_ABOVE:
        cfg = {**cfg, "chunk": LOOP_CHUNK, "num_warps": LOOP_WARPS}
    scale = max(1, (1 << (N.bit_length() - 1)) // CHUNK_REF)
    chunk = cfg["chunk"] * scale
    if 0 < chunk < N and not (N <= WHOLE_MAX and 0 < N % chunk <= chunk // 2):
        warps = min(32, max(cfg["num_warps"] * scale, chunk // WARP_COLS))
        _rmsnorm_chunked[(M,)](x, weight, y, N, x.stride(0), EPS, CHUNK=chunk, num_warps=warps)
        return y
    block = triton.next_power_of_2(N)
    rows = min(cfg["rows_per_program"], triton.next_power_of_2(M))
    warps = min(32, max(cfg["num_warps"], rows * block // WARP_COLS))
    _rmsnorm_rows[(triton.cdiv(M, rows),)](x, weight, y, M, N, x.stride(0), EPS, ROWS=rows, BLOCK=block,
                                           num_warps=warps)
    return y
