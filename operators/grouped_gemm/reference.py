"""Grouped GEMM of MoE experts with uneven group sizes (the definition; shown to the agent).

Rows of x are sorted by expert; expert e owns rows offs[e-1]:offs[e] (offs[-1] = 0 before the
first), possibly none. Each group is multiplied by its expert's weight in the Linear layout:
    out[rows of e] = x[rows of e] @ w[e].T
with products accumulated in float32, returned in x.dtype.
Inputs: x [T, K] bfloat16, w [E, N, K] bfloat16 (both contiguous), offs [E] int32 (the cumulative
group ends, non-decreasing, offs[E-1] == T). Output: out [T, N] bfloat16.
"""
import torch


def reference(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0], w.shape[1], dtype=x.dtype, device=x.device)
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = (x[start:end].float() @ w[e].float().T).to(x.dtype)
        start = end
    return out


def example_inputs(T: int, E: int, N: int, K: int, device: str = "cuda", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, K, generator=g).to(torch.bfloat16).to(device)
    w = torch.randn(E, N, K, generator=g).to(torch.bfloat16).to(device)
    sizes = torch.multinomial(torch.ones(E), T, replacement=True, generator=g).bincount(minlength=E)
    offs = sizes.cumsum(0).to(torch.int32).to(device)
    return x, w, offs
