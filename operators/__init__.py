"""Operators, registered explicitly by name: ``operators.get("rmsnorm")``.

Each lives in ``operators/<name>/`` and exposes ``OPERATOR`` (an ``Operator``).
Operator sets (``conf/operators/*.yaml``) name lists of these.
"""
from __future__ import annotations

import importlib

from ablate.errors import AblateError
from operators._operator import DISTRIBUTIONS, Baseline, Operator, Shape, shape_id

# name -> module that defines OPERATOR. Add a line here to register an operator.
REGISTRY: dict[str, str] = {
    "rmsnorm": "operators.rmsnorm",
}

_cache: dict[str, Operator] = {}


def names() -> list[str]:
    return list(REGISTRY)


def get(name: str) -> Operator:
    if name not in REGISTRY:
        raise AblateError(f"unknown operator {name!r}; valid operators: {', '.join(REGISTRY)}")
    if name not in _cache:
        _cache[name] = importlib.import_module(REGISTRY[name]).OPERATOR
    return _cache[name]


__all__ = ["DISTRIBUTIONS", "REGISTRY", "Baseline", "Operator", "Shape", "get", "names", "shape_id"]
