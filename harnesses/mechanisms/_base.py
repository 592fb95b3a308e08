"""A mechanism adds to the goal-only core: system text, workspace files, tools, submit checks."""
from __future__ import annotations

from typing import Any

from ablate.models import Model
from ablate.sandbox import Tool, Workspace
from harnesses._task import Task


class Mechanism:
    name = "mechanism"

    def __init__(self, **options: Any):
        self.options = options

    def system(self, task: Task) -> str:
        """Text appended to the system prompt."""
        return ""

    def files(self, task: Task) -> dict[str, bytes]:
        """Files added to the workspace before the agent starts."""
        return {}

    def tools(self, task: Task, ws: Workspace, model: Model) -> dict[str, Tool]:
        return {}

    def before_submit(self, state) -> str | None:
        """None accepts the submit; a string defers it and is shown to the agent."""
        return None
