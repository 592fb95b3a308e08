"""Agent scaffolds: the goal-only core plus mechanisms, built by name from a harness config.

    harness = harnesses.build({"name": "kda05", "mechanisms": {"knowledge": {}, "workflow": {}}})
    result = harness.run(model, task, workspace, budget)

Mechanisms (each one module under harnesses/mechanisms/, switchable alone, each saying in the
record what the agent did with it): knowledge (the kernel wiki and its search tools), workflow
(a controller that checks each step's artefact), profiler (Nsight Compute, or timed variants),
search (a lineage of measured candidates, the best promoted), reviewer (implement-then-review),
evaluate_tool (the trusted evaluator on the public shapes).

Or a harness's agent is an external one (``agent: {name: claude_code | codex | command, ...}``,
harnesses/agents): the same task, sandbox and budget, its model calls through ablate's gateway.
The scripted policy (harnesses/scripted) is the offline agent: a deterministic, non-LLM player of
these tools, reached by name as the model registry's "scripted" provider (``+model=scripted``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from ablate.errors import AblateError
from ablate.harnesses import agents
from ablate.harnesses._documents import core_hashes
from ablate.harnesses._harness import Harness, core_system
from ablate.harnesses._loop import AgentResult, BudgetExhausted, LoopState, Spend, run_loop
from ablate.harnesses._task import Budget, Task
from ablate.harnesses.mechanisms.evaluate_tool import EvaluateTool
from ablate.harnesses.mechanisms.knowledge import Knowledge
from ablate.harnesses.mechanisms.profiler import Profiler
from ablate.harnesses.mechanisms.reviewer import Reviewer
from ablate.harnesses.mechanisms.search import Search
from ablate.harnesses.mechanisms.workflow import Workflow

# Mechanisms by name: what a harness config's `mechanisms:` keys may be. The order is the order
# their submit checks run in: the search promotes its best candidate into kernel.py, the workflow
# checks that kernel.py is its kept candidate, the reviewer reviews what would be submitted.
MECHANISMS = {m.name: m for m in (Knowledge, Search, Workflow, Profiler, Reviewer, EvaluateTool)}


def active(mechanisms: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The mechanisms a harness config switches on (a typed config lists every one, null = off)."""
    return {k: dict(v) for k, v in (mechanisms or {}).items() if v is not None}


def build(cfg: Mapping[str, Any], auxiliary_models: Mapping[str, Any] | None = None) -> Harness:
    chosen = active(cfg.get("mechanisms"))
    label = cfg.get("name")
    agent = agents.build(cfg.get("agent"), f"harness {label!r}")
    if agent is not None:
        if chosen:
            raise AblateError(f"harness {label!r}: mechanisms are ablate's own loop's; agent {agent.name} is given "
                              f"skills, plugins, instructions, MCP servers and settings instead (agent.*)")
        return Harness(str(label or "unnamed"), [], dict(auxiliary_models or {}), agent)
    for name in chosen:
        if name not in MECHANISMS:
            raise AblateError(f"harness {label!r}: unknown mechanism {name!r}; valid: {', '.join(MECHANISMS)}")
    mechanisms = []
    for name, cls in MECHANISMS.items():
        if name not in chosen:
            continue
        valid = [f.name for f in fields(cls.Options)]
        unknown = [k for k in chosen[name] if k not in valid]
        if unknown:
            raise AblateError(f"harness {label!r}: mechanism {name!r} has no option {unknown[0]!r}; "
                              f"valid: {', '.join(valid) or '(none)'}")
        try:
            mechanisms.append(cls(cls.Options(**chosen[name]), dict(auxiliary_models or {})))
        except (TypeError, ValueError) as e:
            raise AblateError(f"harness {label!r}: bad options for mechanism {name!r}: {e}") from None
    return Harness(str(label or "unnamed"), mechanisms, dict(auxiliary_models or {}))


__all__ = ["MECHANISMS", "AgentResult", "Budget", "BudgetExhausted", "Harness", "LoopState", "Spend", "Task",
           "active", "build", "core_hashes", "core_system", "run_loop"]
