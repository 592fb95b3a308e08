"""The agent loop: budgets stop it before a call, tool errors go back to the model, submit ends it."""
import pytest

from ablate.errors import AblateError
from ablate.models import Response, ToolCall, ToolSpec, Usage
from ablate.sandbox import Tool, ToolResult
from ablate.harnesses import Budget, run_loop


class FakeModel:
    """Returns queued responses; records what it was sent."""

    id = "fake"

    def __init__(self, responses, cost_per_call=0.0):
        self.responses = list(responses)
        self.cost = cost_per_call
        self.seen = []

    def generate(self, system, messages, tools):
        self.seen.append([m.role for m in messages])
        return self.responses.pop(0)

    def max_cost_of_next_call(self, system, messages, tools):
        return self.cost


def call(name, args=None, id_="c", parse_error=None):
    return Response("", [ToolCall(id_, name, args or {}, parse_error)], Usage(10, 5, cost_usd=0.0, calls=1), "tool_use")


def tools(log):
    def echo(args):
        log.append(args)
        return ToolResult(f"echo {args.get('x')}", seconds=2.0)
    return {
        "echo": Tool(ToolSpec("echo", "", {"type": "object", "properties": {}}), echo),
        "submit": Tool(ToolSpec("submit", "", {"type": "object", "properties": {}}), lambda a: ToolResult("ok", submitted=True)),
    }


def test_submit_ends_the_loop():
    log = []
    r = run_loop(FakeModel([call("echo", {"x": 1}), call("submit")]), "sys", "task", tools(log), Budget(turns=5))
    assert r.end_reason == "submitted" and r.submitted and r.turns == 2
    assert log == [{"x": 1}]
    assert r.usage.input_tokens == 20 and r.tool_s == pytest.approx(2.0, abs=0.5)


def test_turn_budget_stops_before_the_next_call():
    model = FakeModel([call("echo")] * 10)
    r = run_loop(model, "sys", "task", tools([]), Budget(turns=3))
    assert r.end_reason == "turns" and r.turns == 3 and len(model.seen) == 3


def test_cost_budget_refuses_a_call_that_would_cross_it():
    spend = Response("", [ToolCall("c", "echo", {})], Usage(10, 5, cost_usd=0.5), "tool_use")
    model = FakeModel([spend] * 10, cost_per_call=0.4)
    r = run_loop(model, "sys", "task", tools([]), Budget(turns=10, cost_usd=1.0))
    # call 1: 0 + 0.4 <= 1; call 2: 0.5 + 0.4 <= 1; call 3: 1.0 + 0.4 > 1 -> refused
    assert r.end_reason == "cost_usd" and r.turns == 2 and r.usage.cost_usd == pytest.approx(1.0)


def test_tool_time_budget():
    r = run_loop(FakeModel([call("echo")] * 10), "sys", "task", tools([]), Budget(turns=10, tool_s=3.0))
    assert r.end_reason == "tool_s" and r.turns == 2


def test_token_budget():
    big = Response("", [ToolCall("c", "echo", {})], Usage(1000, 500), "tool_use")
    r = run_loop(FakeModel([big] * 10), "sys", "task", tools([]), Budget(turns=10, tokens=2500))
    assert r.end_reason == "tokens" and r.turns == 1


def test_malformed_arguments_and_unknown_tools_go_back_as_errors():
    model = FakeModel([call("echo", parse_error="Expecting value: line 1"), call("nope", id_="d"), call("submit")])
    r = run_loop(model, "sys", "task", tools([]), Budget(turns=5))
    tool_msgs = [m for m in r.messages if m.role == "tool"]
    assert tool_msgs[0].is_error and "invalid arguments" in tool_msgs[0].content
    assert tool_msgs[1].is_error and "unknown tool 'nope'" in tool_msgs[1].content and "echo" in tool_msgs[1].content
    assert r.end_reason == "submitted"


def test_text_only_answers_are_nudged_then_end():
    text = Response("I am done.", [], Usage(1, 1), "end")
    r = run_loop(FakeModel([text] * 5), "sys", "task", tools([]), Budget(turns=10))
    assert r.end_reason == "model_stopped" and r.turns == 3
    assert sum(1 for m in r.messages if m.role == "user") == 3  # task + 2 nudges


def test_refusal_ends_and_is_recorded():
    r = run_loop(FakeModel([Response("no", [], Usage(), "refusal")]), "s", "t", tools([]), Budget(turns=5))
    assert r.end_reason == "refusal"


def test_before_submit_can_defer():
    calls = {"n": 0}

    def once(state):
        calls["n"] += 1
        return "fix the mask first" if calls["n"] == 1 else None

    r = run_loop(FakeModel([call("submit"), call("submit", id_="e")]), "s", "t", tools([]), Budget(turns=5), before_submit=[once])
    tool_msgs = [m for m in r.messages if m.role == "tool"]
    assert tool_msgs[0].content == "fix the mask first" and r.end_reason == "submitted" and r.turns == 2


def test_provider_errors_are_recorded_but_user_errors_propagate():
    class Broken(FakeModel):
        def generate(self, *a):
            raise ConnectionError("reset by peer")

    r = run_loop(Broken([]), "s", "t", tools([]), Budget(turns=5))
    assert r.end_reason == "model_error" and "reset by peer" in r.events[0]["error"]

    class Diverged(FakeModel):
        def generate(self, *a):
            raise AblateError("replay diverged at call 1")

    with pytest.raises(AblateError, match="diverged"):
        run_loop(Diverged([]), "s", "t", tools([]), Budget(turns=5))


def test_spend_is_recorded_per_owner():
    log = []
    r = run_loop(FakeModel([call("echo"), call("echo", id_="d"), call("submit", id_="e")]), "sys", "task", tools(log),
                 Budget(turns=5), owners={"echo": "profiler"})
    assert r.spent["agent"].model_calls == 3 and r.spent["agent"].tokens == 45
    assert r.spent["profiler"].tool_calls == 2 and r.spent["profiler"].tool_s == pytest.approx(4.0, abs=0.5)
    assert r.spent["core"].tool_calls == 1  # submit
    assert r.summary()["spent"]["profiler"]["tool_calls"] == 2


def test_calls_after_a_submit_in_the_same_turn_do_not_run():
    log = []
    both = Response("", [ToolCall("a", "submit", {}), ToolCall("b", "echo", {"x": 9})], Usage(1, 1), "tool_use")
    r = run_loop(FakeModel([both]), "sys", "task", tools(log), Budget(turns=5))
    assert r.submitted and log == []
    assert [m.content for m in r.messages if m.role == "tool"] == ["ok", "not run: the trial has ended"]


def test_after_tool_runs_after_every_tool_call_with_the_spend_so_far():
    two = Response("", [ToolCall("a", "echo", {"x": 1}), ToolCall("b", "nope", {})], Usage(10, 5, cost_usd=0.5, calls=1),
                   "tool_use")
    seen = []
    r = run_loop(FakeModel([call("echo"), two, call("submit")]), "s", "p", tools([]), Budget(turns=5),
                 after_tool=lambda state, tool: seen.append((tool, state.result.turns, state.result.usage.total_tokens,
                                                             state.result.usage.cost_usd)))
    assert r.end_reason == "submitted"
    # an unknown tool is a tool call too: the agent may have changed files before it
    assert seen == [("echo", 1, 15, 0.0), ("echo", 2, 30, 0.5), ("nope", 2, 30, 0.5), ("submit", 3, 45, 0.5)]
