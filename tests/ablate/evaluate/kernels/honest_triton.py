"""Honest RMSNorm in Triton: one program per row, the whole row in one block, fp32 accumulation."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(x_ptr, w_ptr, y_ptr, N, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(y_ptr + row * stride + cols, (x * rstd * w).to(tl.bfloat16), mask=mask)


def kernel(x, weight):
    M, N = x.shape
    y = torch.empty_like(x)
    _rmsnorm[(M,)](x, weight, y, N, x.stride(0), 1e-6, BLOCK=triton.next_power_of_2(N))
    return y
