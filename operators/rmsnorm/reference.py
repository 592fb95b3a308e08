"""RMSNorm over the last dimension (the definition; shown to the agent).

y = x / sqrt(mean(x**2, dim=-1) + EPS) * weight, accumulated in float32, returned in x.dtype.
Inputs: x [M, N] bfloat16 (contiguous), weight [N] bfloat16. Output: [M, N] bfloat16.
"""
import torch

EPS = 1e-6


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * weight.float()).to(x.dtype)


def example_inputs(M: int, N: int, device: str = "cuda", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, N, generator=g).to(torch.bfloat16).to(device)
    weight = torch.randn(N, generator=g).to(torch.bfloat16).to(device)
    return x, weight
