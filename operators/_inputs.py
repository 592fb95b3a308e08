"""Random tensors from the named input distributions (see operators.DISTRIBUTIONS)."""
from __future__ import annotations

import torch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def generator(seed: int, device: str) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


def tensor(size: tuple[int, ...], dist: str, gen: torch.Generator, dtype: torch.dtype, device: str) -> torch.Tensor:
    """Draw from the seed's generator. On a GPU the values are drawn there, from a device generator
    seeded by the CPU one: drawing hundreds of millions of values on the CPU would take longer than
    the evaluation itself. Same seed and device, same values."""
    if str(device).startswith("cuda"):
        sub = torch.Generator(device=device)
        sub.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
        gen, where = sub, {"device": device}
    else:
        where = {}
    if dist == "normal":
        t = torch.randn(size, generator=gen, **where)
    elif dist == "offset":  # non-zero mean: catches kernels that assume centred data
        t = torch.randn(size, generator=gen, **where) + 3.0
    elif dist == "large":  # large magnitude: catches overflow in low-precision accumulation
        t = torch.randn(size, generator=gen, **where) * 100.0
    elif dist == "uniform":
        t = torch.rand(size, generator=gen, **where) * 2.0 - 1.0
    else:
        raise ValueError(f"unknown input distribution {dist!r}")
    return t.to(dtype=dtype, device=device)


def integers(size: tuple[int, ...], low: int, high: int, gen: torch.Generator, device: str,
             dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Integers in [low, high) drawn on the CPU from the seed's generator, then moved."""
    return torch.randint(low, high, size, generator=gen, dtype=dtype).to(device)


def dtype_of(shape: dict) -> torch.dtype:
    return DTYPES[shape.get("dtype", "bfloat16")]


def esize(shape: dict) -> int:
    """Bytes per element of the shape's dtype."""
    return torch.finfo(dtype_of(shape)).bits // 8
