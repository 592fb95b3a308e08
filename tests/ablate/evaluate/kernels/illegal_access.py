"""Writes far outside its output: an illegal memory access that takes the CUDA context down."""
import torch
import triton
import triton.language as tl


@triton.jit
def _bad(y_ptr):
    tl.store(y_ptr + (1 << 40) + tl.arange(0, 128), tl.zeros([128], dtype=tl.float32))


def kernel(x, weight):
    y = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    _bad[(1,)](y)
    return y.to(x.dtype)
