"""Causal multi-head attention forward, flash-attention style (the definition; shown to the agent).

o = softmax(q @ k.T / sqrt(D) + causal_mask) @ v per batch and head, where query i attends to
keys 0..i; scores, softmax and the weighted sum in float32, returned in q.dtype.
Inputs: q, k, v [B, H, S, D] bfloat16 (contiguous). Output: o [B, H, S, D] bfloat16.
"""
import math

import torch


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    S, D = q.shape[-2], q.shape[-1]
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(D)
    causal = torch.ones(S, S, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return (p @ v.float()).to(q.dtype)


def example_inputs(B: int, H: int, S: int, D: int, device: str = "cuda", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, S, D, generator=g).to(torch.bfloat16).to(device) for _ in range(3))
    return q, k, v
