"""Library passthrough through an in-place matrix product (GEMM): `Tensor.addmm_` records
aten::addmm_, a name of its own, while GEMM's library operators named aten::addmm only."""
import torch


def kernel(a, b):
    out = torch.zeros(a.shape[0], b.shape[0], dtype=a.dtype, device=a.device)
    return out.addmm_(a, b.t())
