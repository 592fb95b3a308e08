"""Operators, registered explicitly by name: ``operators.get("rmsnorm")``.

Each lives in ``operators/<name>/`` and exposes ``OPERATOR`` (an ``Operator``).
Operator sets (``conf/operators/*.yaml``) name lists of these; ``load_set(node)`` turns a node
into operators, including problems loaded from KernelBench or FlashInfer Trace, which
``get`` then also finds by name (``kernelbench/1_Square_matrix_multiplication_``).
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from operators._external import with_external_baselines
from operators._operator import DISTRIBUTIONS, Baseline, Operator, Shape, shape_id

# name -> module that defines OPERATOR. Add a line here to register an operator.
REGISTRY: dict[str, str] = {
    "rmsnorm": "operators.rmsnorm",
    "layernorm": "operators.layernorm",
    "softmax": "operators.softmax",
    "cross_entropy": "operators.cross_entropy",
    "swiglu": "operators.swiglu",
    "rope": "operators.rope",
    "gemm": "operators.gemm",
    "attention": "operators.attention",
    "grouped_gemm": "operators.grouped_gemm",
    "topk": "operators.topk",
}

# Loaders of external problem formats: source name -> "module:function(node) -> list[Operator]".
SOURCES: dict[str, str] = {
    "kernelbench": "operators.kernelbench:load_node",
    "flashinfer": "operators.flashinfer:load_node",
}

_cache: dict[str, Operator] = {}
_loaded: dict[str, Operator] = {}  # operators from external formats, by name, once loaded


def names() -> list[str]:
    return list(REGISTRY) + [n for n in _loaded if n not in REGISTRY]


def get(name: str) -> Operator:
    if name in _loaded:
        return _loaded[name]
    if name not in REGISTRY:
        hint = ""
        if "/" in name and name.split("/", 1)[0] in SOURCES:
            hint = f" ({name.split('/', 1)[0]} operators exist once loaded with operators.load_set)"
        raise AblateError(f"unknown operator {name!r}{hint}; valid operators: {', '.join(names())}")
    if name not in _cache:
        _cache[name] = importlib.import_module(REGISTRY[name]).OPERATOR
    return _cache[name]


def register(op: Operator) -> Operator:
    """Make a loaded operator findable by get(op.name)."""
    _loaded[op.name] = op
    return op


def load_set(node: Mapping[str, Any]) -> list[Operator]:
    """The operators a conf/operators node names, with its external baselines attached.

    node: {names: [...], external_baselines: {name: path} or {operator: {name: path}}}, plus
    source: kernelbench | flashinfer (and that loader's keys) for an external problem format.
    """
    source = node.get("source") or "registry"
    if source == "registry":
        ops = [get(n) for n in (node.get("names") or [])]
        if not ops:
            raise AblateError(f"operator set names no operators; valid operators: {', '.join(REGISTRY)}")
    elif source in SOURCES:
        module, fn = SOURCES[source].split(":")
        ops = getattr(importlib.import_module(module), fn)(node)
    else:
        raise AblateError(f"unknown operator source {source!r}; valid sources: registry, {', '.join(SOURCES)}")
    ext = dict(node.get("external_baselines") or {})
    out = []
    for op in ops:
        # Flat entries ({name: path}) apply to every operator; nested ones ({softmax: {name: path}}) to one.
        files = {k: v for k, v in ext.items() if not isinstance(v, Mapping)}
        files.update(ext.get(op.name) if isinstance(ext.get(op.name), Mapping) else {})
        op = with_external_baselines(op, files)
        if op.source or files:
            register(op)
        out.append(op)
    return out


__all__ = ["DISTRIBUTIONS", "REGISTRY", "SOURCES", "Baseline", "Operator", "Shape", "get", "load_set",
           "names", "register", "shape_id", "with_external_baselines"]
