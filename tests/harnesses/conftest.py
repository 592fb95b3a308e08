"""Shared pieces for the harness tests: a workspace, a task, and a model that plays tool calls."""
import pytest

from ablate.models import Response, ToolCall, Usage
from ablate.sandbox import Limits, Workspace
from ablate.harnesses import Task

REFERENCE = b"def reference(x): return x\n"
WRITE = ("write_file", {"path": "kernel.py", "content": "def kernel(x): return x\n"})


@pytest.fixture
def ws(tmp_path):
    return Workspace.create(tmp_path / "ws", {"reference.py": REFERENCE}, Limits(confinement="none"))


def make_task(evaluate=None, gpu=None, shapes=({"M": 1},), files=None):
    return Task("rmsnorm", "goal", list(shapes), dict(files or {"reference.py": REFERENCE}), gpu, evaluate)


class Playback:
    """Plays tool calls in order; answers tool-less (review) calls with `review` (a string, or a
    list taken in order). Records what each call was sent."""

    id = "playback"

    def __init__(self, calls, review="APPROVE", usage=Usage(1, 1), review_usage=Usage(5, 5, cost_usd=0.01)):
        self.calls, self.review, self.usage, self.review_usage = list(calls), review, usage, review_usage
        self.seen, self.reviews = [], []

    def generate(self, system, messages, tools):
        self.seen.append({"system": system, "tools": [t.name for t in tools], "messages": list(messages)})
        if not tools:
            self.reviews.append(messages)
            text = self.review if isinstance(self.review, str) else self.review.pop(0)
            return Response(text, [], self.review_usage, "end")
        if not self.calls:
            return Response("done", [], self.usage, "end")
        name, args = self.calls.pop(0)
        return Response("", [ToolCall(f"c{len(self.seen)}", name, args)], self.usage, "tool_use")

    def max_cost_of_next_call(self, *a):
        return 0.0


def tool_results(result):
    return [m for m in result.messages if m.role == "tool"]


@pytest.fixture
def h():
    """The helpers above, for test modules (conftest is not importable under --import-mode=importlib)."""
    class Helpers:
        pass

    for name, value in {"WRITE": WRITE, "Playback": Playback, "make_task": staticmethod(make_task),
                        "tool_results": staticmethod(tool_results), "REFERENCE": REFERENCE}.items():
        setattr(Helpers, name, value)
    return Helpers
