"""What a harness is given: the task (as the agent may see it) and the budget."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from ablate.harnesses import _documents


@dataclass(frozen=True)
class Task:
    operator: str
    goal: str  # the operator's goal paragraph
    public_shapes: list[dict[str, Any]]
    files: dict[str, bytes]  # what the workspace starts with (reference.py, shapes.json, task.md)
    gpu: str | None  # GPU name, or None: kernels run under Triton's CPU interpreter
    # The trusted evaluator on the public shapes, for harnesses that give the agent an evaluate
    # tool: path of a kernel file -> the evaluator's JSON. The same code path as the final judge.
    evaluate_public: Callable[[str], dict[str, Any]] | None = None
    # Whether the judge also uses shapes the agent is not shown (multi-shape scope), or exactly
    # the shown ones (single-shape scope, smoke).
    hidden_shapes: bool = True
    # Per public shape, the fewest bytes moved and the FLOPs ({"bytes": int, "flops": int}):
    # the roofline floors a profiler compares against.
    roofline: list[dict[str, int]] = field(default_factory=list)

    def prompt(self, budget: "Budget") -> str:
        target = (f"an NVIDIA GPU ({self.gpu})" if self.gpu else
                  "a machine without a GPU: Triton runs in its CPU interpreter (TRITON_INTERPRET=1 is set), "
                  "so timings are only indicative")
        shapes_line = ("Public shapes (the evaluation also uses hidden shapes)" if self.hidden_shapes
                       else "Shapes (the evaluation uses exactly these)")
        return _documents.text("prompts/task.md").format(
            operator=self.operator, goal=self.goal, target=target, shapes_line=shapes_line,
            shapes=json.dumps(self.public_shapes), budget=budget.describe()).strip()


@dataclass(frozen=True)
class Budget:
    """Limits identical across the arms of a match: every model call and tool second of every
    mechanism draws on them. None = unlimited. Also the `budget:` config schema."""

    turns: int = 40
    tokens: Optional[int] = None
    cost_usd: Optional[float] = None
    wall_s: Optional[float] = None
    tool_s: Optional[float] = None
    gpu_s: Optional[float] = None

    def describe(self) -> str:
        parts = [f"{self.turns} turns"]
        for name, unit in (("tokens", " tokens"), ("cost_usd", " USD"), ("wall_s", " s wall time"),
                           ("tool_s", " s of tool time"), ("gpu_s", " GPU-seconds")):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{value:g}{unit}")
        return ", ".join(parts)
