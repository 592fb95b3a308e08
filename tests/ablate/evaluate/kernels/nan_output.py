"""Returns NaN everywhere (NaN must never pass, whatever the tolerance)."""
import torch


def kernel(x, weight):
    return torch.full_like(x, float("nan"))
