"""Reading a conf/operators node (a dict or an OmegaConf DictConfig) leniently."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def node_value(node: Mapping[str, Any], section: str, key: str, default: Any = None) -> Any:
    """node[key], else node[section][key]; Hydra's '???' or an unresolvable value counts as unset."""
    for where in (node, _get(node, section)):
        v = _get(where, key) if isinstance(where, Mapping) or hasattr(where, "get") else None
        if v is not None and v != "???":
            return v
    return default


def _get(node: Any, key: str) -> Any:
    try:
        return node.get(key)
    except Exception:  # omegaconf MissingMandatoryValue / InterpolationResolutionError
        return None
