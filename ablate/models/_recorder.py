"""Records every request/response a trial makes, so it can be replayed without the network."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ablate.models._protocol import Message, Model, Response, ToolSpec, Usage


def request_dict(system: str, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
    return {
        "system": system,
        "messages": [m.to_dict() for m in messages],
        "tools": [t.__dict__ for t in tools],
    }


def response_dict(r: Response) -> dict[str, Any]:
    return {
        "text": r.text,
        "tool_calls": [c.__dict__ for c in r.tool_calls],
        "usage": r.usage.to_dict(),
        "stop_reason": r.stop_reason,
        "raw": r.raw,
    }


class Recorder:
    """Wraps a model; ``calls`` holds one {request, response} per generate() in order."""

    def __init__(self, model: Model):
        self.model = model
        self.id = model.id
        self.calls: list[dict[str, Any]] = []
        self.usage = Usage()

    def generate(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> Response:
        response = self.model.generate(system, messages, tools)
        self.calls.append({"request": request_dict(system, messages, tools), "response": response_dict(response)})
        self.usage = self.usage + response.usage
        return response

    def max_cost_of_next_call(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> float:
        return self.model.max_cost_of_next_call(system, messages, tools)

    def write(self, path: Path) -> None:
        with open(path, "w") as f:
            for call in self.calls:
                f.write(json.dumps(call, default=str) + "\n")
