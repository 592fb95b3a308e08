"""A mechanism adds to the goal-only core: system text, workspace files, tools, submit checks;
and says afterwards what the agent did with it (``use``), for the record.

Each mechanism declares its options as a dataclass (``Options``: also its config schema, so a
misspelt option fails when the config is composed) and the files it shows the agent
(``documents``: globs under harnesses/, hashed into every record).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ablate.models import Model
from ablate.sandbox import Tool, Workspace
from ablate.harnesses import _documents
from ablate.harnesses._task import Task


@dataclass
class NoOptions:
    pass


class Mechanism:
    name: ClassVar[str] = "mechanism"
    Options: ClassVar[type] = NoOptions
    documents: ClassVar[tuple[str, ...]] = ()  # prompt and document files, globs relative to harnesses/
    prompt: ClassVar[str | None] = None  # the system-prompt addition, a file under harnesses/prompts/

    def __init__(self, options: Any = None, auxiliary_models: dict[str, dict] | None = None):
        self.options = options if options is not None else self.Options()
        self.auxiliary_models = dict(auxiliary_models or {})

    def system(self, task: Task) -> str:
        """Text appended to the system prompt."""
        return _documents.text(self.prompt).strip() if self.prompt else ""

    def files(self, task: Task) -> dict[str, bytes]:
        """Files added to the workspace before the agent starts."""
        return {}

    def tools(self, task: Task, ws: Workspace, model: Model) -> dict[str, Tool]:
        return {}

    def before_submit(self, state) -> str | None:
        """None accepts the submit; a string defers it and is shown to the agent."""
        return None

    def use(self) -> dict[str, Any]:
        """What the agent did with this mechanism during the trial (counts, pages, verdicts...)."""
        return {}

    @classmethod
    def hashes(cls) -> dict[str, str]:
        return _documents.hashes(tuple(cls.documents) + ((f"{cls.prompt}",) if cls.prompt else ()))
