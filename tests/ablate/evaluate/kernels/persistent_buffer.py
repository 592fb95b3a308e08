"""Honest, returning the same output buffer every call (allocated once per shape): accepted; each
call's output is read before the next call writes it (CPU) or copied where the judge reads it as
part of the call (GPU)."""
import torch

_out: dict = {}


def kernel(x, weight):
    y = _out.setdefault((x.shape, x.device), torch.empty_like(x))
    xf = x.float()
    y.copy_((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype))
    return y
