"""Rotary position embedding applied to q and k (the definition; shown to the agent).

Llama / Hugging Face convention (rotate_half, not interleaved pairs):
    out = x * cos + rotate_half(x) * sin,  rotate_half([x1, x2]) = [-x2, x1]  (halves of the head dim)
computed in float32, returned in the input dtype. cos and sin are the same for every batch and head.
Inputs: q [B, S, Hq, D], k [B, S, Hk, D] bfloat16 (contiguous, token-major as a QKV projection
writes them), cos [S, D] and sin [S, D] bfloat16 (their two halves are equal, as rope_cache builds
them). Output: the tuple (q_rotated [B, S, Hq, D], k_rotated [B, S, Hk, D]), bfloat16.
"""
import torch

BASE = 500000.0  # Llama-3 rope_theta


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def reference(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    c = cos.float()[None, :, None, :]  # broadcast over batch and heads
    s = sin.float()[None, :, None, :]
    qf, kf = q.float(), k.float()
    return (qf * c + rotate_half(qf) * s).to(q.dtype), (kf * c + rotate_half(kf) * s).to(k.dtype)


def rope_cache(S: int, D: int, dtype=torch.bfloat16, device: str = "cpu"):
    """cos, sin [S, D] for positions 0..S-1, as Llama computes them."""
    inv_freq = 1.0 / (BASE ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = torch.outer(torch.arange(S, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype).to(device), emb.sin().to(dtype).to(device)


def example_inputs(B: int, S: int, Hq: int, Hk: int, D: int, device: str = "cuda", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, Hq, D, generator=g).to(torch.bfloat16).to(device)
    k = torch.randn(B, S, Hk, D, generator=g).to(torch.bfloat16).to(device)
    cos, sin = rope_cache(S, D, device=device)
    return q, k, cos, sin
