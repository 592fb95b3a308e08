"""Random tensors from the named input distributions (see operators.DISTRIBUTIONS)."""
from __future__ import annotations

import math

import torch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def generator(seed: int, device: str) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


def tensor(size: tuple[int, ...], dist: str, gen: torch.Generator, dtype: torch.dtype, device: str,
           zero_rows: bool = True) -> torch.Tensor:
    """Draw from the seed's generator. On a GPU the values are drawn there, from a device generator
    seeded by the CPU one: drawing hundreds of millions of values on the CPU would take longer than
    the evaluation itself. Same seed and device, same values.
    tiny_rows: rows (the last dimension) drawn from N(0,1), then a quarter of them set to zero, half
    scaled by 10**U(-5, -1) and a quarter kept, in a pattern that starts at a random row (so every
    input of a few rows has each kind). zero_rows=False keeps the zero rows tiny instead, for
    external problems where a zero row is degenerate (ties of an argmax, a singular matrix)."""
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
    elif dist == "tiny_rows":  # zero and tiny rows: where a dropped or wrong epsilon shows
        t = torch.randn(size, generator=gen, **where)
        rows = size[:-1]
        kind = (torch.arange(math.prod(rows), **where).reshape(rows)
                + int(torch.randint(0, 4, (1,), generator=gen, **where))) % 4
        tiny = 10.0 ** (torch.rand(rows, generator=gen, **where) * 4.0 - 5.0)
        scale = torch.where(kind == 0, 0.0 if zero_rows else 1e-5, torch.where(kind == 3, 1.0, tiny))
        t = t * scale[..., None] if rows else t * scale
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
