"""Operators, registered explicitly by name: ``operators.get("rmsnorm")``.

Each lives in ``operators/<name>/`` and exposes ``OPERATOR`` (an ``Operator``).
Operator sets (``conf/operators/*.yaml``) name lists of these; ``load_set(node)`` turns a node
into operators, including problems loaded from KernelBench or FlashInfer Trace, which
``get`` then also finds by name (``kernelbench/1_Square_matrix_multiplication_``).

``resolve(name, node)`` is the one operator a trial uses, from what its record holds (the name and
``source_node(op)``): it loads that operator alone (one KernelBench file, one FlashInfer
definition), registers nothing, and is memoised, so a process loads it once however often asked.
"""
from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.operators._external import with_external_baselines
from ablate.operators._operator import DISTRIBUTIONS, Baseline, Operator, Shape, shape_id

# name -> module that defines OPERATOR. Add a line here to register an operator.
REGISTRY: dict[str, str] = {
    "rmsnorm": "ablate.operators.rmsnorm",
    "layernorm": "ablate.operators.layernorm",
    "softmax": "ablate.operators.softmax",
    "cross_entropy": "ablate.operators.cross_entropy",
    "swiglu": "ablate.operators.swiglu",
    "rope": "ablate.operators.rope",
    "gemm": "ablate.operators.gemm",
    "attention": "ablate.operators.attention",
    "grouped_gemm": "ablate.operators.grouped_gemm",
    "topk": "ablate.operators.topk",
}

# Loaders of external problem formats: source name -> "module:function(node) -> list[Operator]".
SOURCES: dict[str, str] = {
    "kernelbench": "ablate.operators.kernelbench:load_node",
    "flashinfer": "ablate.operators.flashinfer:load_node",
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
    out = []
    for op in ops:
        files = _external_files(node, op.name)
        op = with_external_baselines(op, files)
        if op.source or files:
            register(op)
        out.append(op)
    return out


def _external_files(node: Mapping[str, Any], name: str) -> dict[str, str]:
    # Flat entries ({name: path}) apply to every operator; nested ones ({softmax: {name: path}}) to one.
    ext = dict(node.get("external_baselines") or {})
    files = {k: v for k, v in ext.items() if not isinstance(v, Mapping)}
    files.update(ext.get(name) if isinstance(ext.get(name), Mapping) else {})
    return files


def narrow(name: str, node: Mapping[str, Any] | None) -> dict[str, Any]:
    """The part of an operator-set node that loads operator `name` alone: {} for a registry
    operator without external baselines. Reads the node only (imports nothing)."""
    node = dict(node or {})
    files = _external_files(node, name)
    source = node.get("source") or "registry"
    if source == "registry":
        out: dict[str, Any] = {"names": [name]} if files else {}
    else:
        out = {k: v for k, v in node.items() if k not in ("names", "shapes", "external_baselines", source)}
        out.update({k: v for k, v in (node.get(source) or {}).items() if k not in out and k != "names"})
        out["names"] = [name.removeprefix(f"{source}/")]
    return {**out, "external_baselines": files} if files else out


def source_node(op: Operator, node: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The node that loads `op` again in any process and from any working directory (paths made
    absolute): what a trial's record keeps. `node`: the set it came from (external baselines)."""
    out = narrow(op.name, {**dict(node or {}), **op.source})
    if "path" in out:
        out["path"] = str(Path(str(out["path"])).expanduser().resolve())
    if "external_baselines" in out:
        out["external_baselines"] = {k: str(Path(v).expanduser().resolve()) for k, v in out["external_baselines"].items()}
    return out


def resolve(name: str, node: Mapping[str, Any] | None = None) -> Operator:
    """The operator `name` of the operator set `node` (a conf/operators node or a record's
    `source_node`), loading only that operator. Memoised per (name, node)."""
    return _resolve(name, json.dumps(narrow(name, node), sort_keys=True, default=str))


@functools.lru_cache(maxsize=64)
def _resolve(name: str, node_json: str) -> Operator:
    node = json.loads(node_json)
    source = node.get("source") or "registry"
    if source == "registry":
        op = get(name)
    elif source in SOURCES:
        prefix = f"{source}/"
        if not name.startswith(prefix):
            raise AblateError(f"operator {name!r} is not a {source} operator (expected {prefix}<name>)")
        module, fn = SOURCES[source].split(":")
        loaded = getattr(importlib.import_module(module), fn)(node)
        op = next((o for o in loaded if o.name == name), None)
        if op is None:
            raise AblateError(f"{source} source {node.get('path')!r} has no operator {name!r}")
    else:
        raise AblateError(f"unknown operator source {source!r}; valid sources: registry, {', '.join(SOURCES)}")
    return with_external_baselines(op, _external_files(node, name))


__all__ = ["DISTRIBUTIONS", "REGISTRY", "SOURCES", "Baseline", "Operator", "Shape", "get", "load_set",
           "names", "narrow", "register", "resolve", "shape_id", "source_node", "with_external_baselines"]
