"""LayerNorm over the last dimension (the definition; shown to the agent).

y = (x - mean(x)) / sqrt(var(x) + EPS) * weight + bias, with the biased variance (divide by N),
accumulated in float32, returned in x.dtype.
Inputs: x [M, N] bfloat16 (contiguous), weight [N] bfloat16, bias [N] bfloat16. Output: [M, N] bfloat16.
"""
import torch

EPS = 1e-5


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    return ((xf - mean) * torch.rsqrt(var + EPS) * weight.float() + bias.float()).to(x.dtype)


def example_inputs(M: int, N: int, device: str = "cuda", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, N, generator=g).to(torch.bfloat16).to(device)
    weight = torch.randn(N, generator=g).to(torch.bfloat16).to(device)
    bias = torch.randn(N, generator=g).to(torch.bfloat16).to(device)
    return x, weight, bias
