"""Partial output: computes only the first half of the rows."""
import torch


def kernel(x, weight):
    y = torch.empty_like(x)
    h = x.shape[0] // 2
    xf = x[:h].float()
    y[:h] = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
    return y
