"""Records every request/response a trial makes, so it can be replayed without the network, and
what each call paid, its failed requests included."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ablate.models._protocol import FailedAttempt, Message, Model, Response, ToolSpec, Usage


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
    """Wraps a model; ``calls`` holds one {request, response} per generate() in order.

    A call whose requests failed before one answered also has ``failed_attempts`` (each failed
    request: its error, what it used, who pays); a call that brought no reply at all (an outage,
    a reply cut at the wall budget) has ``response: null`` and ``error``. ``usage``: what the
    replies used (the agent's budget: cut replies included); ``lost``: what the failed requests
    charged to the infrastructure used; ``paid``: both."""

    def __init__(self, model: Model):
        self.model = model
        self.id = model.id
        self.calls: list[dict[str, Any]] = []
        self.usage = Usage()
        self.lost = Usage()

    @property
    def paid(self) -> Usage:
        return self.usage + self.lost

    def generate(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> Response:
        try:
            response = self.model.generate(system, messages, tools)
        except Exception as e:
            failed = list(getattr(e, "failed_attempts", None) or [])
            call = {"request": request_dict(system, messages, tools), "response": None,
                    "error": f"{type(e).__name__}: {e}"[:1000]}
            self._add(call, failed)
            raise
        self.usage = self.usage + response.usage
        self._add({"request": request_dict(system, messages, tools), "response": response_dict(response)},
                  response.failed_attempts)
        return response

    def _add(self, call: dict[str, Any], failed: list[FailedAttempt]) -> None:
        if failed:
            call["failed_attempts"] = [f.to_dict() for f in failed]
        for f in failed:
            if f.charged_to == "agent":
                self.usage = self.usage + f.usage
            else:
                self.lost = self.lost + f.usage
        self.calls.append(call)
        self.recorded(call)

    def recorded(self, call: dict[str, Any]) -> None:
        """Called with each call as it is recorded (a trial streams it to disk)."""

    def max_cost_of_next_call(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> float:
        return self.model.max_cost_of_next_call(system, messages, tools)

    def write(self, path: Path) -> None:
        with open(path, "w") as f:
            for call in self.calls:
                f.write(json.dumps(call, default=str) + "\n")
