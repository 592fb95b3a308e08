"""Arithmetic rules the project states once and imports everywhere (the judge, the scripted
policy, the analysis, the benchmarks).

    geomean([1.2, 0.9, 1.5])   # exp(mean(log v)); None without values or with one not positive

A geometric mean is exp(mean(log v)), never prod(v) ** (1 / n), which overflows and underflows.
Code that runs in the agent's sandbox (harnesses/scripts/) cannot import the project and spells
the same formula out.
"""
from __future__ import annotations

import math
from collections.abc import Iterable


def geomean(values: Iterable[float | None]) -> float | None:
    """exp(mean(log v)) of the values; None when there are none or one is not a positive number."""
    v = list(values)
    if not v or not all(x and x > 0 for x in v):
        return None
    return math.exp(sum(math.log(x) for x in v) / len(v))


__all__ = ["geomean"]
