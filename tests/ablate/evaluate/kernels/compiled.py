"""Honest, torch.compile of its own torch code: accepted (Inductor's compile workers are build tools)."""
import torch


@torch.compile(dynamic=False)
def _rms(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)


def kernel(x, weight):
    return _rms(x, weight)
