"""Random tensors from the named input distributions (see operators.DISTRIBUTIONS)."""
from __future__ import annotations

import torch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def generator(seed: int, device: str) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


def tensor(size: tuple[int, ...], dist: str, gen: torch.Generator, dtype: torch.dtype, device: str) -> torch.Tensor:
    """Draw on the CPU (same values on any device for a seed), then move."""
    if dist == "normal":
        t = torch.randn(size, generator=gen)
    elif dist == "offset":  # non-zero mean: catches kernels that assume centred data
        t = torch.randn(size, generator=gen) + 3.0
    elif dist == "large":  # large magnitude: catches overflow in low-precision accumulation
        t = torch.randn(size, generator=gen) * 100.0
    elif dist == "uniform":
        t = torch.rand(size, generator=gen) * 2.0 - 1.0
    else:
        raise ValueError(f"unknown input distribution {dist!r}")
    return t.to(dtype=dtype).to(device)


def integers(size: tuple[int, ...], low: int, high: int, gen: torch.Generator, device: str,
             dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Integers in [low, high) drawn on the CPU from the seed's generator, then moved."""
    return torch.randint(low, high, size, generator=gen, dtype=dtype).to(device)


def dtype_of(shape: dict) -> torch.dtype:
    return DTYPES[shape.get("dtype", "bfloat16")]


def esize(shape: dict) -> int:
    """Bytes per element of the shape's dtype."""
    return torch.finfo(dtype_of(shape)).bits // 8
