"""Honest, with a thread pool of its own that outlives each call (the pool's workers wait for the
next call): accepted, and the row says threads were left running."""
from concurrent.futures import ThreadPoolExecutor

import torch

_pool = ThreadPoolExecutor(2)


def _rows(x, weight, y, lo, hi):
    xf = x[lo:hi].float()
    y[lo:hi] = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)


def kernel(x, weight):
    y = torch.empty_like(x)
    half = x.shape[0] // 2
    for f in [_pool.submit(_rows, x, weight, y, 0, half), _pool.submit(_rows, x, weight, y, half, x.shape[0])]:
        f.result()
    return y
