"""Honest, a CUDA graph of its own, as agents write to cut launch overhead on small shapes: the
Triton RMSNorm captured once per shape, with static buffers, and each call copying its inputs in
and replaying the graph. Its output is the graph's static buffer, the same every call (an output
born in a graph's memory). Without a GPU there are no graphs: it launches the kernel directly."""
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


def _launch(x, weight, y):
    M, N = x.shape
    _rmsnorm[(M,)](x, weight, y, N, x.stride(0), 1e-6, BLOCK=triton.next_power_of_2(N))


_graphs: dict = {}


def kernel(x, weight):
    if not x.is_cuda:
        y = torch.empty_like(x)
        _launch(x, weight, y)
        return y
    key = (tuple(x.shape), x.stride(), x.dtype, x.device)
    if key not in _graphs:
        sx, sw, sy = torch.empty_like(x), torch.empty_like(weight), torch.empty_like(x)
        sx.copy_(x)
        sw.copy_(weight)
        _launch(sx, sw, sy)  # compiles the kernel before the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            _launch(sx, sw, sy)
        _graphs[key] = (g, sx, sw, sy)
    g, sx, sw, sy = _graphs[key]
    sx.copy_(x)
    sw.copy_(weight)
    g.replay()
    return sy
