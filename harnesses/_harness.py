"""A harness = the goal-only core (prompt, core tools, loop) plus zero or more mechanisms."""
from __future__ import annotations

from typing import Any

from ablate.models import Model
from ablate.sandbox import Workspace, core_tools
from harnesses._loop import AgentResult, run_loop
from harnesses._task import Budget, Task
from harnesses.mechanisms._base import Mechanism

# The goal-only system prompt: the goal and the constraints, no kernel-specific scaffolding.
CORE_SYSTEM = (
    "You are working on a software task in a sandboxed working directory. You can run shell commands "
    "and read and write files with the tools given. There is no network access. Decide for yourself how "
    "to check and measure your work."
)


class Harness:
    def __init__(self, name: str, mechanisms: list[Mechanism]):
        self.name = name
        self.mechanisms = mechanisms

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "mechanisms": {m.name: m.options for m in self.mechanisms}}

    def system_prompt(self, task: Task) -> str:
        return "\n\n".join([CORE_SYSTEM] + [s for m in self.mechanisms if (s := m.system(task))])

    def run(self, model: Model, task: Task, ws: Workspace, budget: Budget, progress=None) -> AgentResult:
        for m in self.mechanisms:
            for name, data in m.files(task).items():
                ws.write(name, data)  # owned by the sandbox user, so the agent may edit its copy
        tools = core_tools(ws)
        for m in self.mechanisms:
            tools.update(m.tools(task, ws, model))
        return run_loop(model, self.system_prompt(task), task.prompt(budget), tools, budget,
                        before_submit=[m.before_submit for m in self.mechanisms], progress=progress)
