"""Agent scaffolds: the goal-only core plus mechanisms, built by name from a harness config.

    harness = harnesses.build({"name": "kda05", "mechanisms": {"knowledge": {}, "workflow": {}}})
    result = harness.run(model, task, workspace, budget)
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from harnesses._harness import CORE_SYSTEM, Harness
from harnesses._loop import AgentResult, run_loop
from harnesses._task import Budget, Task
from harnesses.mechanisms.evaluate_tool import EvaluateTool
from harnesses.mechanisms.knowledge import Knowledge
from harnesses.mechanisms.profiler import Profiler
from harnesses.mechanisms.reviewer import Reviewer
from harnesses.mechanisms.workflow import Workflow

# Mechanisms by name: what a harness config's `mechanisms:` keys may be.
MECHANISMS = {m.name: m for m in (Knowledge, Workflow, Profiler, Reviewer, EvaluateTool)}


def build(cfg: Mapping[str, Any]) -> Harness:
    mechanisms = []
    for name, options in (cfg.get("mechanisms") or {}).items():
        if name not in MECHANISMS:
            raise AblateError(f"harness {cfg.get('name')!r}: unknown mechanism {name!r}; valid: {', '.join(MECHANISMS)}")
        try:
            mechanism = MECHANISMS[name](**dict(options or {}))
        except (TypeError, ValueError) as e:
            raise AblateError(f"harness {cfg.get('name')!r}: bad options for mechanism {name!r}: {e}") from None
        mechanism.options = dict(options or {})  # as configured, for the record
        mechanisms.append(mechanism)
    return Harness(str(cfg.get("name", "unnamed")), mechanisms)


__all__ = ["CORE_SYSTEM", "MECHANISMS", "AgentResult", "Budget", "Harness", "Task", "build", "run_loop"]
