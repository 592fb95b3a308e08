"""Who pays for what: the recorder keeps every failed request beside the call it belonged to, the
agent loop ends a reply cut at the wall budget as the agent's (paid from its budget), and the
infrastructure's losses stay out of the budget."""
from __future__ import annotations

import json
import time

import pytest

from ablate.models import CallCut, FailedAttempt, Message, ProviderOutage, Recorder, Response, Usage
from ablate.models._replay import ReplayModel
from ablate.harnesses._loop import run_loop
from ablate.harnesses._task import Budget


class Scripted:
    """A model whose generate() does what each step says: a Response, or an exception to raise."""

    id = "stand-in"

    def __init__(self, *steps):
        self.steps = list(steps)

    def generate(self, system, messages, tools):
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    def max_cost_of_next_call(self, system, messages, tools):
        return 0.0


def reply(text="ok", tokens=100, cost=0.01, failed=()):
    return Response(text, [], Usage(input_tokens=tokens, cost_usd=cost, calls=1), "end", failed_attempts=list(failed))


def lost(tokens, cost, charged_to="infrastructure"):
    return FailedAttempt("StreamDropped: the stream ended after 3 events without message_stop",
                         Usage(input_tokens=tokens, cost_usd=cost), 0.5, charged_to)


def test_failed_requests_are_recorded_with_their_call_and_paid_outside_the_budget(tmp_path):
    outage = ProviderOutage("anthropic x: gave up after 2 attempts; last error: 529", [lost(0, 0.0), lost(0, 0.0)])
    rec = Recorder(Scripted(reply(failed=[lost(50, 0.005)]), outage))
    rec.generate("sys", [Message("user", "hi")], [])
    with pytest.raises(ProviderOutage):
        rec.generate("sys", [Message("user", "hi")], [])
    assert (rec.usage.input_tokens, rec.lost.input_tokens, rec.paid.input_tokens) == (100, 50, 150)
    assert rec.paid.cost_usd == pytest.approx(0.015)
    first, second = rec.calls
    assert first["response"]["text"] == "ok" and first["failed_attempts"][0]["usage"]["input_tokens"] == 50
    assert second["response"] is None and second["error"].startswith("ProviderOutage: anthropic x: gave up")
    assert len(second["failed_attempts"]) == 2
    rec.write(tmp_path / "model_calls.jsonl")  # a replay serves the reply, not the call that brought none
    replay = ReplayModel(tmp_path / "model_calls.jsonl")
    assert len(replay.calls) == 1 and replay.generate("sys", [Message("user", "hi")], []).text == "ok"


def test_a_reply_cut_at_the_wall_budget_ends_the_trial_as_the_agents_and_is_paid():
    cut = CallCut("the trial's wall budget ran out while the reply was arriving (0.1s ago): the reply was cut")
    cut.usage = Usage(input_tokens=300, output_tokens=40, cost_usd=0.02, calls=1)
    cut.failed_attempts = [FailedAttempt(str(cut), cut.usage, 2.0, "agent")]
    model = Recorder(Scripted(reply(), cut))
    result = run_loop(model, "sys", "write a kernel", {}, Budget(turns=10))
    assert result.end_reason == "wall_s" and result.turns == 2
    assert result.usage.input_tokens == 400 and result.usage.cost_usd == pytest.approx(0.03)
    assert model.usage.input_tokens == 400 and model.lost.total_tokens == 0  # the agent's, not lost
    assert model.calls[-1]["failed_attempts"][0]["charged_to"] == "agent"


def test_an_outage_ends_the_attempt_not_the_trial():
    model = Scripted(ProviderOutage("anthropic x: gave up after 7 attempts; last error: 529 overloaded_error"))
    with pytest.raises(ProviderOutage):  # never a record: the runner retries the trial
        run_loop(model, "sys", "write a kernel", {}, Budget(turns=10))


def test_the_loop_gives_each_call_the_end_of_the_wall_budget(server, monkeypatch):
    """A reply that would stream for 10 s under a 1 s wall budget is cut within its timeout."""
    from ablate.models import get

    from .test_anthropic import body, message, sse, TEXT
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    start, block = sse(message([TEXT]))[:2]
    delta = ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "more words "}})
    server.reply(steps=[body([start, block])] + [0.1, body([delta])] * 100)
    model = Recorder(get({"provider": "anthropic", "id": "claude-fable-5-1", "stream": True, "base_url": server.url,
                          "price_per_mtok": {"input": 10.0, "output": 50.0, "cache_read": 1.0, "cache_write": 12.5},
                          "max_retries": 2, "retry_base_s": 0.01, "timeout_s": 2}))
    t = time.monotonic()
    result = run_loop(model, "sys", "write a kernel", {}, Budget(turns=10, wall_s=1.0))
    assert result.end_reason == "wall_s" and time.monotonic() - t < 1.0 + 2 + 1
    assert result.usage.input_tokens == 100 and result.usage.output_tokens > 1 and result.usage.cost_usd > 0
    assert json.loads(json.dumps(model.calls))[0]["response"] is None
