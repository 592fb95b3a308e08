"""Precision downcast: accumulates in float16, which overflows on large inputs."""
import torch


def kernel(x, weight):
    xh = x.half()
    rstd = torch.rsqrt((xh * xh).sum(-1, keepdim=True) / x.shape[-1] + 1e-6)
    return (xh * rstd * weight.half()).to(x.dtype)
