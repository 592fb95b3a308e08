"""SwiGLU activation of a gated MLP (the definition; shown to the agent).

y = silu(gate) * up, where silu(g) = g * sigmoid(g), computed in float32, returned in gate.dtype.
Inputs: gate [M, N] bfloat16, up [M, N] bfloat16 (both contiguous). Output: [M, N] bfloat16.
"""
import torch


def reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    g = gate.float()
    return (g * torch.sigmoid(g) * up.float()).to(gate.dtype)


def example_inputs(M: int, N: int, device: str = "cuda", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    gate = torch.randn(M, N, generator=g).to(torch.bfloat16).to(device)
    up = torch.randn(M, N, generator=g).to(torch.bfloat16).to(device)
    return gate, up
