# scripted-configs: [{"num_warps": 4, "block": 1024}, {"num_warps": 8, "block": 2048}, {"num_warps": 8, "block": 4096}, {"num_warps": 16, "block": 8192}]
"""Row softmax in Triton: one program per row. A row that fits one block stays in registers;
a wider row is streamed in blocks with a running max and sum (online softmax), then normalised
in a second pass."""
import torch
import triton
import triton.language as tl

CONFIG = {"num_warps": 4, "block": 1024}


@triton.jit
def _softmax_rows(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr, ONE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride
    y_row = y_ptr + row * stride
    cols = tl.arange(0, BLOCK)
    if ONE_BLOCK:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_row + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # Per-lane running max and sum; a finite start keeps exp(m - m_new) defined for lanes
        # that only ever see masked (-inf) elements.
        m = tl.full([BLOCK], -1e30, tl.float32)
        d = tl.zeros([BLOCK], tl.float32)
        for start in range(0, N, BLOCK):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            d = d * tl.exp(m - m_new) + tl.exp(x - m_new)
            m = m_new
        row_max = tl.max(m, axis=0)
        inv = 1.0 / tl.sum(d * tl.exp(m - row_max), axis=0)
        for start in range(0, N, BLOCK):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
            tl.store(y_row + start + cols, (tl.exp(x - row_max) * inv).to(y_ptr.dtype.element_ty), mask=mask)


def kernel(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    M, N = x.shape
    y = torch.empty_like(x)
    one = triton.next_power_of_2(N) <= CONFIG["block"]
    block = triton.next_power_of_2(N) if one else CONFIG["block"]
    _softmax_rows[(M,)](x, y, N, x.stride(0), BLOCK=block, ONE_BLOCK=one, num_warps=CONFIG["num_warps"])
    return y
