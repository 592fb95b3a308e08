# scripted-configs: [{"block": 4096, "num_warps": 8, "max_width": 16384}, {"block": 4096, "num_warps": 4, "max_width": 16384}, {"block": 8192, "num_warps": 16, "max_width": 16384}, {"block": 16384, "num_warps": 16, "max_width": 16384}, {"block": 2048, "num_warps": 8, "max_width": 16384}, {"block": 8192, "num_warps": 16, "max_width": 8192}, {"block": 16384, "num_warps": 32, "max_width": 16384}, {"block": 2048, "num_warps": 8, "max_width": 2048}, {"block": 1024, "num_warps": 4, "max_width": 1024}]
"""Row softmax in Triton, one program per row, in float32 with exp2.
- A row of up to `max_width` (at most ONE_BLOCK_MAX) columns stays whole in registers: read
  once, written once (at least one warp per WARP_COLS columns, so no row spills).
- A wider row (a vocabulary) is streamed in blocks: a first pass keeps the running row maximum
  and the sum rescaled to it (online softmax: one exponential per element), a second pass reads
  the row again (from L2, where the first pass's loads were marked to stay) and writes
  exp(x - max) / sum. A row is streamed in four blocks or more, of at least `block` and at most
  STREAM_BLOCK_MAX columns, one warp per WARP_COLS of them.
Why these bounds (benchmarks/results/h200-spin/row-templates/, widths that are no eval
shape's): a whole row of 32768 columns needs 32 warps, one program an SM, whose loads and stores
then take turns; at 24576 columns it took 0.294 ms in registers against 0.204 ms streamed in
blocks of 8192. At 65536 columns blocks of 16384 took 0.296 ms, blocks of 4096 0.409. Holding
fewer rows in flight so that the second pass surely hits L2 (a persistent grid) was slower at
every width tried. So was reading the row once, split over programs that each hold a block in
registers and wait for the row's other blocks through global atomics (0.427 against 0.290 ms at
65536 columns; commit e41c3d8, benchmarks/results/h200-counters): the libraries that read it once
reduce within a cluster of blocks through distributed shared memory, which Triton does not expose.
Halving the rows in flight where two programs an SM would outgrow L2 (32 warps, one an SM) moved
no width by more than 0.7% (commit deb21b5, benchmarks/results/h200-l2-rows)."""
import torch
import triton
import triton.language as tl

CONFIG = {"block": 4096, "num_warps": 8, "max_width": 16384}
SHAPE_CONFIGS = {}  # "M=..,N=..": a configuration measured faster on that shape
WARP_COLS = 1024  # at most this many columns of a tile per warp: 32 values a thread
ONE_BLOCK_MAX = 16384
STREAM_BLOCK_MAX = 16384
HOLD_PER_THREAD = 32  # columns of a streamed row's head each thread keeps in registers; a configuration's "hold" overrides
LOG2E = tl.constexpr(1.4426950408889634)
VEC = tl.constexpr(8)  # columns of a streamed block a thread reduces alone: one 16-byte load of bf16
LANES = True  # a streamed row's statistics kept per thread, reduced once (False: reduced every block)


@triton.jit
def _softmax_row(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"), eviction_policy="evict_first")
    x = x.to(tl.float32) * LOG2E
    e = tl.exp2(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_streamed(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr, HOLD: tl.constexpr, LANES: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    cols = tl.arange(0, BLOCK)
    m = -float("inf")  # running maximum (log2 units) and the sum of 2^(x - m)
    s = 0.0
    if HOLD > 0:  # the row's head stays in registers, as loaded: the second pass does not read it
        head = tl.load(x_row + tl.arange(0, HOLD), eviction_policy="evict_first")
        h = head.to(tl.float32) * LOG2E
        m = tl.max(h, axis=0)
        s = tl.sum(tl.exp2(h - m), axis=0)
    if LANES:
        # each thread keeps its own maximum and sum over its VEC-column pieces; the program reduces
        # them once, after the loop, so its warps never wait for each other while they stream
        tile = tl.arange(0, BLOCK // VEC)[:, None] * VEC + tl.arange(0, VEC)[None, :]
        m_l = tl.full([BLOCK // VEC], -float("inf"), tl.float32)
        s_l = tl.zeros([BLOCK // VEC], tl.float32)
        for start in range(HOLD, N, BLOCK):
            mask = start + tile < N
            x = tl.load(x_row + start + tile, mask=mask, other=-float("inf"), eviction_policy="evict_last")
            x = x.to(tl.float32) * LOG2E
            m_new = tl.maximum(m_l, tl.max(x, axis=1))
            base = tl.where(m_new == -float("inf"), 0.0, m_new)  # a piece past the row's end: no inf - inf
            s_l = s_l * tl.exp2(m_l - base) + tl.sum(tl.exp2(x - base[:, None]), axis=1)
            m_l = m_new
        m_loop = tl.max(m_l, axis=0)  # finite: the loop read one column at least
        m_new = tl.maximum(m, m_loop)
        s = s * tl.exp2(m - m_new) + tl.sum(s_l * tl.exp2(m_l - m_new), axis=0)
        m = m_new
    else:
        for start in range(HOLD, N, BLOCK):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=-float("inf"), eviction_policy="evict_last")
            x = x.to(tl.float32) * LOG2E
            m_new = tl.maximum(m, tl.max(x, axis=0))  # finite: every block holds one column at least
            s = s * tl.exp2(m - m_new) + tl.sum(tl.exp2(x - m_new), axis=0)
            m = m_new
    inv = 1.0 / s
    if HOLD > 0:
        if head.dtype == tl.bfloat16:
            # widened by hand, not with .to(): the same expression as above would be merged with it and
            # the head kept live in float32 over the loop (twice the registers)
            wide = (head.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
        else:
            wide = head.to(tl.float32)
        y_head = tl.exp2(wide * LOG2E - m) * inv
        tl.store(y_row + tl.arange(0, HOLD), y_head.to(y_ptr.dtype.element_ty), eviction_policy="evict_first")
    for start in range(HOLD, N, BLOCK):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=-float("inf"), eviction_policy="evict_first")
        y = tl.exp2(x.to(tl.float32) * LOG2E - m) * inv
        tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask, eviction_policy="evict_first")


def kernel(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    cfg = SHAPE_CONFIGS.get(f"M={M},N={N}", CONFIG)
    y = torch.empty_like(x)
    width = triton.next_power_of_2(N)
    if width <= min(cfg["max_width"], ONE_BLOCK_MAX):
        warps = min(32, max(cfg["num_warps"], width // WARP_COLS))
        _softmax_row[(M,)](x, y, N, x.stride(0), BLOCK=width, num_warps=warps)
    else:
        block = min(STREAM_BLOCK_MAX, max(cfg["block"], width // 4))
        warps = min(32, max(cfg["num_warps"], block // WARP_COLS))
        hold = min(32 * warps * cfg.get("hold", HOLD_PER_THREAD), width // 2)  # under half the row
        _softmax_streamed[(M,)](x, y, N, x.stride(0), BLOCK=block, HOLD=hold, LANES=LANES, num_warps=warps)
    return y
