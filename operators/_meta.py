"""Roofline numbers of externally defined problems, measured without running them: the
computation is traced on the meta device (shapes only), its FLOPs counted by PyTorch."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def nbytes(x: Any) -> int:
    """Bytes of every tensor in x (a tensor, or a tuple / list / dict of them)."""
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (tuple, list)):
        return sum(nbytes(t) for t in x)
    if isinstance(x, dict):
        return sum(nbytes(t) for t in x.values())
    return 0


def to_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_like(x, device="meta")
    if isinstance(x, (tuple, list)):
        return type(x)(to_meta(t) for t in x)
    return x


def trace(build: Callable[[], tuple[Callable[..., Any], tuple, int]]) -> tuple[int, int] | None:
    """build() -> (fn, meta inputs, bytes of parameters); returns (bytes, flops), or None when
    the computation cannot run on the meta device (data-dependent shapes, .item(), ...)."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.device("meta"):
            fn, inputs, param_bytes = build()
            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad():
                out = fn(*inputs)
        return nbytes(inputs) + param_bytes + nbytes(out), int(counter.get_total_flops())
    except Exception:
        return None
