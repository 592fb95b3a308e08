# scripted-configs: [{"block": 4096, "num_warps": 8, "max_width": 16384}, {"block": 4096, "num_warps": 4, "max_width": 16384}, {"block": 8192, "num_warps": 16, "max_width": 16384}, {"block": 16384, "num_warps": 16, "max_width": 16384}, {"block": 2048, "num_warps": 8, "max_width": 16384}, {"block": 8192, "num_warps": 16, "max_width": 8192}, {"block": 16384, "num_warps": 32, "max_width": 16384}, {"block": 2048, "num_warps": 8, "max_width": 2048}, {"block": 1024, "num_warps": 4, "max_width": 1024}]
"""Row softmax in Triton, one program per row, in float32 with exp2.
- A row of up to `max_width` (at most ONE_BLOCK_MAX) columns stays whole in registers: read
  once, written once (at least one warp per WARP_COLS columns, so no row spills).
- A wider row (a vocabulary) is streamed in blocks: a first pass keeps the running row maximum
  and the sum rescaled to it (online softmax: one exponential per element), a second pass reads
  the row again (from L2, where the first pass's loads were marked to stay) and writes
  exp(x - max) / sum. Up to WIDE_ABOVE columns a row is streamed in four blocks or more, of at
  least `block` and at most STREAM_BLOCK_MAX columns, one warp per WARP_COLS of them, the
  statistics reduced across the program every block.
- A row wider than WIDE_ABOVE goes in blocks of WIDE_BLOCK at WIDE_WARPS warps, and each thread
  keeps its own maximum and sum, reduced once after the loop: the warps stream without waiting
  for each other at every block (benchmarks/results/h200-lanes: 0.282 against 0.295 ms at 65536
  columns, 0.265 against 0.284 at 100000). Where ROWS_AN_SM such rows an SM would outgrow L2, the
  row's head (HOLD_PER_THREAD columns a thread) also stays in registers as loaded: the second pass
  reads only the rest, and the registers it takes leave one program an SM, so fewer rows share L2
  (DRAM traffic at M=2048,N=128256: 1028 MB against 1267-1440; 0.527 against 0.658 ms at 151936
  columns, 0.264 against 0.315 at 200000).
Why these bounds (benchmarks/results/h200-spin/row-templates/, widths that are no eval
shape's): a whole row of 32768 columns needs 32 warps, one program an SM, whose loads and stores
then take turns; at 24576 columns it took 0.294 ms in registers against 0.204 ms streamed in
blocks of 8192, where per-thread statistics were no faster (h200-lanes: they take fewer
registers, so more rows share L2). Holding fewer rows in flight with a persistent grid was slower
at every width tried, and so was the wide rows' first pass pipelined by Triton through shared
memory (2 or 3 stages of 16384 columns: 7-35% slower than the rule, commit 4d85db1,
h200-lanes/rule). So was reading the row once, split over programs that each hold a block in
registers and wait for the row's other blocks through global atomics (0.427 against 0.290 ms at
65536 columns; commit e41c3d8, benchmarks/results/h200-counters): the libraries that read it once
reduce within a cluster of blocks through distributed shared memory, which Triton does not expose.
32 warps alone do not leave one program an SM: at 32 registers a thread an SM holds two (h200-l2-rows
measured no change from them; h200-lanes' counters say why)."""
import torch
import triton
import triton.language as tl

CONFIG = {"block": 4096, "num_warps": 8, "max_width": 16384}
SHAPE_CONFIGS = {}  # "M=..,N=..": a configuration measured faster on that shape
WARP_COLS = 1024  # at most this many columns of a tile per warp: 32 values a thread
ONE_BLOCK_MAX = 16384
STREAM_BLOCK_MAX = 16384
WIDE_ABOVE = 32768  # columns (padded to a power of two) above which a row goes as below
WIDE_BLOCK = 32768
WIDE_WARPS = 32
ROWS_AN_SM = 2  # a wide row's head is held where this many rows an SM outgrow L2 (at 32 registers, two fit an SM)
HOLD_PER_THREAD = 32  # columns of a wide row's head each thread keeps in registers (0: never)
LOG2E = tl.constexpr(1.4426950408889634)
VEC = tl.constexpr(8)  # columns of a streamed block a thread reduces alone: one 16-byte load of bf16


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


def _num_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def _l2_bytes(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).L2_cache_size if device.type == "cuda" else 1 << 20


def kernel(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    cfg = SHAPE_CONFIGS.get(f"M={M},N={N}", CONFIG)
    y = torch.empty_like(x)
    width = triton.next_power_of_2(N)
    if width <= min(cfg["max_width"], ONE_BLOCK_MAX):
        warps = min(32, max(cfg["num_warps"], width // WARP_COLS))
        _softmax_row[(M,)](x, y, N, x.stride(0), BLOCK=width, num_warps=warps)
    elif width > WIDE_ABOVE:
        hold = 0
        if ROWS_AN_SM * _num_sms(x.device) * N * x.element_size() > _l2_bytes(x.device):
            hold = min(32 * WIDE_WARPS * HOLD_PER_THREAD, width // 2)  # under half the row
        _softmax_streamed[(M,)](x, y, N, x.stride(0), BLOCK=WIDE_BLOCK, HOLD=hold, LANES=True, num_warps=WIDE_WARPS)
    else:
        block = min(STREAM_BLOCK_MAX, max(cfg["block"], width // 4))
        warps = min(32, max(cfg["num_warps"], block // WARP_COLS))
        _softmax_streamed[(M,)](x, y, N, x.stride(0), BLOCK=block, HOLD=0, LANES=False, num_warps=warps)
    return y
