"""Writes the result into its input and returns the input itself."""
import torch


def kernel(x, weight):
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
    x.copy_(y)
    return x
