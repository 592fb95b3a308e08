"""Honest, through a custom operator of its own (torch.library.custom_op): accepted."""
import torch


@torch.library.custom_op("ablate_test::rmsnorm", mutates_args=())
def _rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)


def kernel(x, weight):
    return _rmsnorm(x, weight)
