"""A harness = the goal-only core (prompt, core tools, loop) plus zero or more mechanisms; or an
external agent (harnesses.agents: Claude Code, Codex, any program) in the same sandbox."""
from __future__ import annotations

from typing import Any

from ablate.models import Model
from ablate.sandbox import Tool, ToolResult, Workspace, core_tools
from ablate.harnesses import _documents
from ablate.harnesses._loop import AgentResult, run_loop
from ablate.harnesses._task import Budget, Task
from ablate.harnesses.mechanisms._base import Mechanism


def core_system() -> str:
    """The goal-only system prompt: the goal and the constraints, no kernel-specific scaffolding."""
    return _documents.text("prompts/core.md").strip()


class Harness:
    def __init__(self, name: str, mechanisms: list[Mechanism], auxiliary_models: dict[str, dict] | None = None,
                 agent=None):
        self.name = name
        self.mechanisms = mechanisms  # in the registry's order: the order their submit checks run in
        self.auxiliary_models = dict(auxiliary_models or {})
        self.agent = agent  # an external agent (harnesses.agents.Agent), or None: ablate's own loop

    def describe(self) -> dict[str, Any]:
        """For the record: the mechanisms and their options, auxiliary models, and the hash of
        every prompt and document this harness shows (core ones apart: they are the match's)."""
        from dataclasses import asdict

        out = {"name": self.name, "mechanisms": {m.name: asdict(m.options) for m in self.mechanisms},
               "auxiliary_models": {k: v.get("id") for k, v in self.auxiliary_models.items()},
               "hashes": {"core": _documents.core_hashes(), **{m.name: m.hashes() for m in self.mechanisms}}}
        if self.agent is not None:
            out["agent"] = self.agent.describe()
        return out

    def system_prompt(self, task: Task) -> str:
        return "\n\n".join([core_system()] + [s for m in self.mechanisms if (s := m.system(task))])

    def run(self, model: Model, task: Task, ws: Workspace, budget: Budget, progress=None,
            after_tool=None, model_config: dict | None = None) -> AgentResult:
        if self.agent is not None:  # model_config: the trial's model node, which the agent's gateway serves
            return self.agent.run(model, task, ws, budget, progress=progress, after_tool=after_tool,
                                  model_config=model_config)
        for m in self.mechanisms:
            for name, data in m.files(task).items():
                ws.write(name, data)  # owned by the sandbox user, so the agent may edit its copy
        tools = core_tools(ws)
        owners = dict.fromkeys(tools, "core")
        for m in self.mechanisms:
            for name, tool in m.tools(task, ws, model).items():
                if name in tools:
                    raise ValueError(f"mechanism {m.name} redefines the tool {name!r}")
                tools[name], owners[name] = _guarded(name, tool), m.name
        result = run_loop(model, self.system_prompt(task), task.prompt(budget), tools, budget, owners=owners,
                          before_submit=[m.before_submit for m in self.mechanisms], progress=progress,
                          after_tool=after_tool)
        result.mechanisms = {m.name: m.use() for m in self.mechanisms}
        return result


def _guarded(name: str, tool: Tool) -> Tool:
    """A mechanism's tool whose file errors (a path the agent turned into a symlink out, a file it
    removed) and bad arguments come back to the agent as an error result, as the core tools' do."""
    def run(args):
        try:
            return tool.run(args)
        except (OSError, ValueError, TypeError, KeyError) as e:
            return ToolResult(f"{name}: {type(e).__name__}: {e}", is_error=True)
    return Tool(tool.spec, run)
