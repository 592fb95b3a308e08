"""Row-wise top-k: the k largest values of each row and their column indices (the definition;
shown to the agent).

Inputs: x [M, N] bfloat16 (contiguous), k (a Python int, 1 <= k <= N).
Output: the tuple (values [M, k] bfloat16, indices [M, k] int64), values in descending order.
Where values tie, any of the tied columns is a correct index: the check compares the values
exactly, and requires x[i, indices[i, j]] == values[i, j] with distinct indices in each row
(`accepts`, which a check script can call: indices are not compared with the reference's).
"""
import torch


def reference(x: torch.Tensor, k: int):
    values, indices = torch.topk(x, k, dim=-1, largest=True, sorted=True)
    return values, indices


def example_inputs(M: int, N: int, k: int, device: str = "cuda", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, N, generator=g).to(torch.bfloat16).to(device), k


def accepts(got, want, x: torch.Tensor, k: int) -> bool:
    """The tie rule above: whether `got` is a right answer where `want` is the reference's."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return False
    (values, indices), (want_values, _) = got, want
    if values.shape != want_values.shape or values.dtype != want_values.dtype or indices.dtype != torch.int64 \
            or indices.shape != want_values.shape or not torch.equal(values, want_values):
        return False
    if indices.numel() and bool(((indices < 0) | (indices >= x.shape[-1])).any()):
        return False
    if indices.shape[-1] > 1 and bool((indices.sort(dim=-1).values.diff(dim=-1) == 0).any()):
        return False
    return torch.equal(x.gather(-1, indices), want_values)
