"""bf16 matrix multiply in the nn.Linear layout (the definition; shown to the agent).

c = a @ b.T, with products accumulated in float32, returned in a.dtype.
Inputs: a [M, K] bfloat16, b [N, K] bfloat16 (both contiguous; b is a Linear weight).
Output: c [M, N] bfloat16.
"""
import torch


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float().T).to(a.dtype)


def example_inputs(M: int, N: int, K: int, device: str = "cuda", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(torch.bfloat16).to(device)
    b = torch.randn(N, K, generator=g).to(torch.bfloat16).to(device)
    return a, b
