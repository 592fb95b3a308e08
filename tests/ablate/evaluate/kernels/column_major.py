"""Honest, returning a column-major output (a dense permutation of the contract's shape): accepted,
read by the judge with its strides."""
import torch


def kernel(x, weight):
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
    out = torch.empty_strided(y.shape, (1, y.shape[0]), dtype=y.dtype, device=y.device)
    out.copy_(y)
    return out
