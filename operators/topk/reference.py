"""Row-wise top-k: the k largest values of each row and their column indices (the definition;
shown to the agent).

Inputs: x [M, N] bfloat16 (contiguous), k (a Python int, 1 <= k <= N).
Output: the tuple (values [M, k] bfloat16, indices [M, k] int64), values in descending order.
Where values tie, any of the tied columns is a correct index: the check compares the values
exactly, and requires x[i, indices[i, j]] == values[i, j] with distinct indices in each row.
"""
import torch


def reference(x: torch.Tensor, k: int):
    values, indices = torch.topk(x, k, dim=-1, largest=True, sorted=True)
    return values, indices


def example_inputs(M: int, N: int, k: int, device: str = "cuda", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, N, generator=g).to(torch.bfloat16).to(device), k
