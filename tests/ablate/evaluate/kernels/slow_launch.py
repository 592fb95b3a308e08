"""Honest RMSNorm whose host side is slow: half a millisecond of Python before it launches
anything. Its time must be the device's (the spin before the start event covers the launch), and
its host cost still shows in the row's wall_ms."""
import time

import torch


def kernel(x, weight):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.0005:
        pass
    xf = x.float()
    rstd = torch.rsqrt((xf * xf).sum(-1, keepdim=True) / x.shape[-1] + 1e-6)
    return (xf * rstd * weight.float()).to(x.dtype)
