"""Cost of a call from the config's price table, and an upper bound on the next call's cost.

Prices are USD per million tokens: ``price_per_mtok: {input, output, cache_read, cache_write}``.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from ablate.models._protocol import Message, ToolSpec, Usage

PRICE_KEYS = ("input", "output", "cache_read", "cache_write")
CHARS_PER_TOKEN = 3  # fewer chars per token than real text has, so the estimate errs high


def prices(cfg: Mapping[str, Any], label: str, required: bool) -> dict[str, float]:
    """The price table of a model config. ``required``: a paid API must name all four prices
    (the cost budget depends on them); a local server may leave them out (free)."""
    table = cfg.get("price_per_mtok") or {}
    missing = [k for k in PRICE_KEYS if table.get(k) is None]
    if required and missing:
        raise AblateError(f"model {label} needs price_per_mtok.{missing[0]} (USD per million tokens) "
                          f"in its config; the cost budget is computed from it")
    out = {k: float(table.get(k) or 0.0) for k in PRICE_KEYS}
    if any(v < 0 for v in out.values()):
        raise AblateError(f"model {label}: price_per_mtok values must be >= 0, got {out}")
    return out


def cost_usd(price: Mapping[str, float], u: Usage) -> float:
    """``u.input_tokens`` are the uncached input tokens; cache reads and writes are billed apart."""
    return (u.input_tokens * price["input"] + u.output_tokens * price["output"]
            + u.cache_read_tokens * price["cache_read"] + u.cache_write_tokens * price["cache_write"]) / 1e6


def estimate_input_tokens(system: str, messages: list[Message], tools: list[ToolSpec]) -> int:
    """An overestimate of the prompt's tokens, without a tokenizer or a network call."""
    chars = len(system) + len(json.dumps([t.__dict__ for t in tools], default=str))
    for m in messages:
        chars += len(m.content) + 16  # role and block framing
        chars += sum(len(json.dumps(c.arguments, default=str)) + len(c.name) + len(c.id) for c in m.tool_calls)
        if m.raw is not None:
            chars += len(json.dumps(m.raw, default=str))  # thinking blocks count as input
    return math.ceil(chars / CHARS_PER_TOKEN)


def max_cost(price: Mapping[str, float], max_tokens: int, system: str, messages: list[Message],
             tools: list[ToolSpec]) -> float:
    """Upper bound on one call: every input token at the dearer of input and cache-write prices
    (a cache breakpoint may write the whole prefix), plus max_tokens of output."""
    n_in = estimate_input_tokens(system, messages, tools)
    return (n_in * max(price["input"], price["cache_write"]) + max_tokens * price["output"]) / 1e6
