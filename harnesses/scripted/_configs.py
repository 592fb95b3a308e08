"""The scripted policy's kernels and their configurations: the operator's parameterised Triton
template (``templates/<operator>.py``, outside every agent workspace: its first line lists the
configurations), rendered at a configuration or a shape dispatch; the order the sweep tries them in;
which results it trusts; and its own test script (harnesses/scripts/check.py), written into the
workspace with the trial's operator, configurations, seconds and variant shapes.
"""
from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.harnesses.mechanisms._measure import MARGIN, improves

TEMPLATES = Path(__file__).resolve().parent / "templates"
CHECK = Path(__file__).resolve().parents[1] / "scripts" / "check.py"  # written into the workspace as check.py
SWEEP_SHARE = 0.05  # of the trial's tightest time budget (tool, GPU or wall seconds) the sweep may take
SWEEP_MAX_S = 150.0
SWEEP_MIN_S = 20.0
CPU_CONFIGS = 3  # configurations swept under Triton's CPU interpreter, whose timings mean little
VARIANT_LOSS = 0.10  # a configuration this much slower than the best on a variant shape is fragile

PASSTHROUGH = '''\
# No template for this operator: the scripted policy falls back to the reference itself, which the
# evaluator rejects as a library passthrough (it is not a kernel of the agent's own).
from reference import reference as kernel
'''


def check_script(operator: str, configs: list[dict[str, Any]], seconds: float, variants: list[dict[str, Any]]) -> str:
    """The test script as the policy writes it: check.py with the trial's values in its four lines."""
    out = CHECK.read_text()
    for name, value in (("OPERATOR", repr(operator)), ("CONFIGS", json.dumps(configs)), ("SECONDS", str(seconds)),
                        ("VARIANTS", json.dumps(variants))):
        line = f"{name} = {value}"
        out, n = re.subn(rf"^{name} = .*$", lambda _, line=line: line, out, count=1, flags=re.M)
        if n != 1:
            raise ValueError(f"{CHECK}: no '{name} = ...' line")
    return out


@dataclass
class Swept:
    """One configuration's result in the sweep."""

    index: int
    config: dict[str, Any]
    correct: bool
    ms: float | None
    shapes_ms: list[float]
    variants_ms: list[float] = field(default_factory=list)


# -- template rendering ------------------------------------------------------------------------
def template(operator: str) -> tuple[str, list[dict[str, Any]]] | None:
    """(source, configs) of the operator's template, or None if there is none."""
    path = TEMPLATES / f"{operator.split('/')[-1]}.py"
    if not path.is_file():
        return None
    source = path.read_text()
    first = source.splitlines()[0]
    if not first.startswith("# scripted-configs:"):
        raise ValueError(f"{path}: first line must be '# scripted-configs: [...]'")
    return source, json.loads(first.split(":", 1)[1])


def shape_key(shape: Mapping[str, Any]) -> str:
    """The key a template's SHAPE_CONFIGS uses for a shape: its dimensions in order, no dtype."""
    return ",".join(f"{k}={v}" for k, v in shape.items() if k != "dtype")


def render(source: str, config: dict[str, Any], shape_configs: dict[str, dict[str, Any]] | None = None) -> str:
    """The template with its CONFIG line set to one configuration and, when given, its
    SHAPE_CONFIGS line to the shapes dispatched to other configurations."""
    out, n = re.subn(r"^CONFIG = .*$", f"CONFIG = {config!r}", source, count=1, flags=re.M)
    if n != 1:
        raise ValueError("template has no 'CONFIG = ...' line")
    if shape_configs:
        table = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in sorted(shape_configs.items())) + "}"
        out, n = re.subn(r"^SHAPE_CONFIGS = \{\}(.*)$", lambda m: f"SHAPE_CONFIGS = {table}{m.group(1)}", out,
                         count=1, flags=re.M)
        if n != 1:
            raise ValueError("template has no 'SHAPE_CONFIGS = {}' line")
    return out


# -- choice of configuration ----------------------------------------------------------------
def variants(shapes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Shapes the sweep also measures, beyond the public ones: each public shape with its innermost
    dimension halved (the head dim, the row width, the reduction depth), since the hidden shapes
    differ from the public ones and those sizes change which tile fits."""
    out: list[dict[str, Any]] = []
    for shape in shapes:
        dims = [k for k, v in shape.items() if k != "dtype" and isinstance(v, int)]
        if dims and shape[dims[-1]] >= 2:
            variant = {**shape, dims[-1]: shape[dims[-1]] // 2}
            if variant not in shapes and variant not in out:
                out.append(variant)
    return out


def robust(results: list["Swept"], loss: float = VARIANT_LOSS) -> list["Swept"]:
    """The correct configurations no more than `loss` slower than the fastest on every variant shape
    (all of them when none is): a public-shape win bought with a clear loss elsewhere is not chosen."""
    n = min((len(r.variants_ms) for r in results), default=0)
    best = [min(r.variants_ms[v] for r in results) for v in range(n)]
    kept = [r for r in results if all(r.variants_ms[v] <= best[v] * (1 + loss) for v in range(n))]
    return kept or results


def configs_from_knowledge(search_output: str, default: dict[str, Any]) -> list[dict[str, Any]]:
    """Configurations recommended by the tables of knowledge-base search results. A table counts
    when its columns name at least two of the template's keys ("num warps" -> num_warps), or the
    only one; each row gives those keys, the template's default configuration the others."""
    try:
        hits = json.loads(search_output)
    except (json.JSONDecodeError, TypeError):
        return []
    keys = set(default)
    found: list[dict[str, Any]] = []
    for hit in hits if isinstance(hits, list) else []:
        rows = [[c.strip() for c in line.strip().strip("|").split("|")]
                for line in str(hit.get("text", "")).splitlines() if line.strip().startswith("|")]
        if len(rows) < 3:
            continue
        header = [re.sub(r"\W+", "_", h.lower()).strip("_") for h in rows[0]]
        named = [k for k in default if k in header]
        if len(named) < min(2, len(keys)):
            continue
        for row in rows[2:]:
            try:
                config = {**default, **{k: int(row[header.index(k)]) for k in named}}
            except (ValueError, IndexError):
                continue
            if config not in found:
                found.append(config)
    return found


def choose_configs(configs: list[dict[str, Any]], recommended: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """The order to try the template's configurations in: the recommended ones first (in the
    table's order), then the template's default (its first), then the rest in an order the seed
    draws, so that seeds search differently and each seed always the same way."""
    first = [configs[configs.index(c)] for c in recommended if c in configs]  # the template's own dicts (key order)
    if configs and configs[0] not in first:
        first.append(configs[0])
    rest = [c for c in configs if c not in first]
    random.Random(seed).shuffle(rest)
    return first + rest


def dispatch_wins(new: list[float | None], old: list[float | None], margin: float = MARGIN) -> bool:
    """A shape-specialised kernel's case: measurably faster on some shape, measurably slower on none
    (the workflow controller's rule for its specialise phase)."""
    pairs = list(zip(new, old))
    wins = any(a is not None and b is not None and improves(a, b, margin) for a, b in pairs)
    losses = any(a is None or (b is not None and a > b * (1 + margin)) for a, b in pairs)
    return bool(pairs) and wins and not losses

