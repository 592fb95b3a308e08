"""Each mechanism alone: what it adds to the goal-only core, and what it changes in the loop."""
import json

import pytest

import harnesses
from ablate.errors import AblateError
from ablate.models import Response, ToolCall, Usage
from ablate.sandbox import Limits, Workspace
from harnesses import Budget, Task
from harnesses.mechanisms.knowledge import WIKI


@pytest.fixture
def ws(tmp_path):
    return Workspace.create(tmp_path / "ws", {"reference.py": b"def reference(x): return x\n"}, Limits(confinement="none") if "confinement" in Limits.__dataclass_fields__ else Limits())


def task(evaluate=None):
    return Task("rmsnorm", "goal", [{"M": 1}], {"reference.py": b"def reference(x): return x\n"}, None, evaluate)


class Scripted:
    """Plays tool calls in order; answers tool-less (reviewer) calls with `review`."""

    id = "test"

    def __init__(self, calls, review="APPROVE"):
        self.calls, self.review, self.reviews = list(calls), review, 0

    def generate(self, system, messages, tools):
        if not tools:
            self.reviews += 1
            text = self.review if isinstance(self.review, str) else self.review.pop(0)
            return Response(text, [], Usage(5, 5, cost_usd=0.01), "end")
        name, args = self.calls.pop(0)
        return Response("", [ToolCall(f"c{len(self.calls)}", name, args)], Usage(1, 1), "tool_use")

    def max_cost_of_next_call(self, *a):
        return 0.0


WRITE = ("write_file", {"path": "kernel.py", "content": "def kernel(x): return x\n"})


def test_goal_only_has_only_the_core_tools_and_prompt(ws):
    h = harnesses.build({"name": "goal_only", "mechanisms": {}})
    seen = {}

    class Spy(Scripted):
        def generate(self, system, messages, tools):
            seen["tools"], seen["system"] = {t.name for t in tools}, system
            return super().generate(system, messages, tools)

    r = h.run(Spy([WRITE, ("submit", {})]), task(), ws, Budget(turns=5))
    assert r.end_reason == "submitted"
    assert seen["tools"] == {"bash", "read_file", "write_file", "list_files", "submit"}
    assert seen["system"] == harnesses.CORE_SYSTEM
    assert not (ws.path / "wiki").exists()


def test_knowledge_copies_the_wiki_into_the_workspace(ws):
    docs = sorted(p.name for p in WIKI.glob("*.md"))
    assert "README.md" in docs
    h = harnesses.build({"name": "k", "mechanisms": {"knowledge": {}}})
    assert "wiki/README.md" in h.system_prompt(task())
    h.run(Scripted([WRITE, ("submit", {})]), task(), ws, Budget(turns=5))
    assert sorted(p.name for p in (ws.path / "wiki").glob("*.md")) == docs


def test_workflow_refuses_submit_until_every_phase_is_done_in_order(ws):
    h = harnesses.build({"name": "w", "mechanisms": {"workflow": {"phases": ["understand", "plan"]}}})
    calls = [WRITE, ("submit", {}), ("complete_phase", {"phase": "plan", "report": "x"}),
             ("complete_phase", {"phase": "understand", "report": "x"}),
             ("complete_phase", {"phase": "plan", "report": "x"}), ("submit", {})]
    r = h.run(Scripted(calls), task(), ws, Budget(turns=10))
    results = [m for m in r.messages if m.role == "tool"]
    assert "complete the workflow phases first (understand, plan)" in results[1].content and results[1].is_error
    assert "next phase is 'understand'" in results[2].content
    assert r.end_reason == "submitted" and r.turns == 6


def test_unknown_workflow_phase_and_mechanism_are_clear_errors():
    with pytest.raises(AblateError, match="unknown workflow phases"):
        harnesses.build({"name": "w", "mechanisms": {"workflow": {"phases": ["dance"]}}})
    with pytest.raises(AblateError, match="valid: knowledge, workflow, profiler, reviewer, evaluate_tool"):
        harnesses.build({"name": "w", "mechanisms": {"telepathy": {}}})


def test_reviewer_sends_the_kernel_back_once_then_accepts(ws):
    h = harnesses.build({"name": "r", "mechanisms": {"reviewer": {"rounds": 1}}})
    model = Scripted([WRITE, ("submit", {}), ("submit", {})], review=["REVISE\nmask the tail"])
    r = h.run(model, task(), ws, Budget(turns=5))
    assert model.reviews == 1 and r.end_reason == "submitted" and r.turns == 3
    assert "mask the tail" in [m for m in r.messages if m.role == "tool"][1].content
    assert r.events[0]["verdict"] == "revise"
    assert r.usage.cost_usd == pytest.approx(0.01)  # the reviewer's call is charged to the trial


def test_evaluate_tool_uses_the_trusted_evaluator_callback(ws):
    seen = []

    def evaluate(path):
        seen.append(path)
        return {"verdict": "accepted", "reasons": [], "timing": "cpu-interpreted", "shapes": [{"shape": {"M": 1}, "correct": True}]}

    h = harnesses.build({"name": "e", "mechanisms": {"evaluate_tool": {}}})
    r = h.run(Scripted([WRITE, ("evaluate", {}), ("submit", {})]), task(evaluate), ws, Budget(turns=5))
    assert seen == [str(ws.path / "kernel.py")]
    out = json.loads([m for m in r.messages if m.role == "tool"][1].content)
    assert out["verdict"] == "accepted" and out["shapes"][0]["correct"] is True


def test_profiler_runs_its_script_in_the_workspace(ws, monkeypatch):
    ran = []
    monkeypatch.setattr(ws, "run", lambda cmd, *a, **k: ran.append(cmd) or type("R", (), {"output": "table", "exit_code": 0, "timed_out": False, "seconds": 0.1, "gpu_seconds": 0.0})())
    h = harnesses.build({"name": "p", "mechanisms": {"profiler": {"reps": 3}}})
    r = h.run(Scripted([WRITE, ("profile", {}), ("submit", {})]), task(), ws, Budget(turns=5))
    assert ran == ["python .profile.py"] and "REPS" not in (ws.path / ".profile.py").read_text()
    assert "range(3)" in (ws.path / ".profile.py").read_text()
    assert "table" in [m for m in r.messages if m.role == "tool"][1].content
