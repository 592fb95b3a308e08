"""What a harness is given: the task (as the agent may see it) and the budget."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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

    def prompt(self, budget: "Budget") -> str:
        target = f"an NVIDIA GPU ({self.gpu})" if self.gpu else "a machine without a GPU: Triton runs in its CPU interpreter (TRITON_INTERPRET=1 is set), so timings are only indicative"
        return "\n".join([
            f"Operator: {self.operator}",
            "",
            self.goal,
            "",
            "Write `kernel.py` in the working directory defining `kernel(*inputs)` with exactly the inputs "
            "and outputs of `reference` in reference.py, using Triton or CUDA (CuPy RawKernel or "
            "torch.utils.cpp_extension.load_inline). Make it as fast as you can while staying correct; "
            "calling the library implementation of the operator does not count as your kernel.",
            f"Target: {target}.",
            f"Public shapes (the evaluation also uses hidden shapes): {json.dumps(self.public_shapes)}",
            f"Budget: {budget.describe()}.",
            "Call `submit` when kernel.py is final.",
        ])


@dataclass(frozen=True)
class Budget:
    """Limits identical across the arms of a match. None = unlimited."""

    turns: int = 40
    tokens: int | None = None
    cost_usd: float | None = None
    wall_s: float | None = None
    tool_s: float | None = None
    gpu_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"{self.turns} turns"]
        for name, unit in (("tokens", " tokens"), ("cost_usd", " USD"), ("wall_s", " s wall time"),
                           ("tool_s", " s of tool time"), ("gpu_s", " GPU-seconds")):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{value:g}{unit}")
        return ", ".join(parts)
