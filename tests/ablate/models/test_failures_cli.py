"""A badly behaved model server, each behaviour a real trial through `python -m ablate` (goal_only,
rmsnorm) whose record is checked: what the infrastructure broke is an infrastructure failure,
retried, and paid outside the agent's budget; what the model did is the agent's outcome; every
request that was paid for is in the record's cost.

The stand-in is tests/ablate/models/conftest.py's local HTTP server, speaking each provider's real
shapes (Messages API events; chat completion chunks). Times are short but their margins wide: a
bound checked here is one the old behaviour missed by far more than the margin.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from ablate.models import TOKEN_ESTIMATE

from .conftest import Reply
from .test_anthropic import MODEL_INFO, PING, TEXT, body, error, message, sse
from .test_openai import MODEL, chunks, completion, tool_call

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
PRICE = {"input": 10.0, "output": 50.0, "cache_read": 1.0, "cache_write": 12.5}  # fable-5.1's


def ablate(server, store, provider, *overrides):
    """One trial of goal_only on rmsnorm through the CLI against the stand-in; the finished run."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    if provider == "anthropic":
        env["ANTHROPIC_API_KEY"] = "sk-ant-test"
        server.routes[("GET", "/v1/models/claude-fable-5-1")] = Reply(200, MODEL_INFO)  # the preflight
        model = ["+model=fable-5.1", f"model.base_url={server.url}"]
    else:
        listing = {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 1, "owned_by": "vllm"}]}
        server.routes[("GET", "/v1/models")] = Reply(200, listing)
        model = ["+model=vllm-local", f"model.base_url={server.url}/v1"]
    settings = dict(o.split("=", 1) for o in ["study.seeds=[0]", "retries=0", "retry_delay_s=0",
                                               "model.retry_base_s=0.01", "model.timeout_s=3", *overrides])
    args = ["+harness=goal_only", *model, f"store={store}", *(f"{k}={v}" for k, v in settings.items())]
    return subprocess.run([sys.executable, "-m", "ablate", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def record(store):
    [path] = Path(store).glob("smoke/*/record.json")
    return json.loads(path.read_text()), path.parent


def incomplete(store):
    """(incomplete.json, model calls) of each incomplete attempt, oldest first."""
    out = []
    for d in sorted(Path(store).glob("smoke/.incomplete/*/*")):
        calls = [json.loads(line) for line in (d / "model_calls.jsonl").read_text().splitlines()]
        out.append((json.loads((d / "incomplete.json").read_text()), calls))
    return out


def model_calls(trial_dir):
    return [json.loads(line) for line in (trial_dir / "model_calls.jsonl").read_text().splitlines()]


def list_files(i):
    """A Messages API reply calling the list_files tool."""
    use = {"type": "tool_use", "id": f"toolu_{i:02d}", "name": "list_files", "input": {"path": "."}}
    return message([TEXT, use], "tool_use")


# --- Anthropic ---------------------------------------------------------------------------------

def test_pings_alone_are_an_outage_retried_within_the_wall_budget(server, tmp_path):
    """Every reply: message_start, then pings for 60 s. Before: the trial ran until the stand-in
    stopped and was recorded as ended by its wall budget, the agent's outcome."""
    started = sse(message([TEXT]))[:1]
    server.routes[("POST", "/v1/messages")] = Reply(steps=[body(started)] + [0.25, body([PING])] * 240)
    run = ablate(server, tmp_path, "anthropic", "budget.wall_s=8", "model.timeout_s=2", "model.max_retries=30")
    assert run.returncode == 1, run.stderr[-2000:]
    assert not list(tmp_path.glob("smoke/*/record.json"))  # never an outcome of the agent
    [(info, calls)] = incomplete(tmp_path)
    assert info["failure"]["kind"] == "infrastructure" and info["failure"]["cause"] == "api_outage"
    assert "wall budget" in info["failure"]["message"] and "StreamStalled" in info["failure"]["message"]
    took = (datetime.fromisoformat(info["ended_at"]) - datetime.fromisoformat(info["started_at"])).total_seconds()
    assert took < 8 + 2 + 8  # the wall budget, the timeout, and a wide margin: not the 60 s of pings
    [call] = calls  # the call that brought no reply, each of its requests with what it used
    assert call["response"] is None and len(call["failed_attempts"]) >= 2  # retried
    errors = [f["error"].split(":")[0] for f in call["failed_attempts"]]
    assert set(errors[:-1]) == {"StreamStalled"} and errors[-1] in ("StreamStalled", "CallCut")  # the last: at the end
    assert all(f["usage"]["input_tokens"] == 100 and f["charged_to"] == "infrastructure" for f in call["failed_attempts"])
    assert info["paid"]["input_tokens"] == 100 * len(call["failed_attempts"]) and info["paid"]["cost_usd"] > 0


def test_a_stream_dropped_mid_reply_is_retried_not_taken_as_the_models_end(server, tmp_path):
    """Three streams cut before message_stop. Before: each an "end" reply, model_stopped."""
    events = sse(list_files(0))
    for cut in (3, 5, len(events) - 1):
        server.reply(steps=[body(events[:cut])])
    server.reply(steps=[body(events)])
    server.reply(steps=[body(sse(list_files(1)))])
    run = ablate(server, tmp_path, "anthropic", "budget.turns=2")
    assert run.returncode == 0, run.stderr[-2000:]
    rec, trial_dir = record(tmp_path)
    assert rec["end_reason"] == "turns" and rec["agent"]["events"] == []
    assert rec["model"]["attempts"] == 5 and rec["model"]["retries"] == 3
    usage, paid = rec["usage"], rec["usage"]["paid"]
    assert usage["calls"] == 2 and usage["input_tokens"] == 200  # the two replies: the agent's budget
    lost = paid["by_attempt"][-1]["lost_to_failed_requests"]
    assert lost["total_tokens"] > 300 and paid["total_tokens"] == usage["total_tokens"] + lost["total_tokens"]
    assert paid["cost_usd"] == pytest.approx(usage["cost_usd"] + lost["cost_usd"]) and lost["cost_usd"] > 0
    first = model_calls(trial_dir)[0]
    assert [f["error"].split(":")[0] for f in first["failed_attempts"]] == ["StreamDropped"] * 3
    assert first["response"]["tool_calls"][0]["name"] == "list_files"


def test_malformed_streamed_tool_json_goes_back_to_the_model_and_is_paid(server, tmp_path):
    """Before: the SDK raised, the trial ended as model_error and the paid call was lost."""
    bad = [(ev, dict(d, delta={"type": "input_json_delta", "partial_json": '{"command": ls -la}'}))
           if d.get("delta", {}).get("type") == "input_json_delta" else (ev, d)
           for ev, d in sse(message([TEXT, {"type": "tool_use", "id": "toolu_bad", "name": "bash", "input": {}}],
                                    "tool_use"))]
    server.reply(steps=[body(bad)])
    server.reply(steps=[body(sse(list_files(1)))])
    run = ablate(server, tmp_path, "anthropic", "budget.turns=2")
    assert run.returncode == 0, run.stderr[-2000:]
    rec, trial_dir = record(tmp_path)
    assert rec["end_reason"] == "turns" and rec["model"]["attempts"] == 2
    assert rec["usage"]["calls"] == 2 and rec["usage"]["cost_usd"] == pytest.approx(2 * (100 * 10 + 20 * 50) / 1e6)
    calls = model_calls(trial_dir)
    assert len(calls) == 2 and calls[0]["response"]["tool_calls"][0]["parse_error"].startswith("arguments are not valid")
    transcript = [json.loads(line) for line in (trial_dir / "transcript.jsonl").read_text().splitlines()]
    [result] = [m for m in transcript if m["role"] == "tool" and m["tool_call_id"] == "toolu_bad"]
    assert result["is_error"] and result["content"].startswith("invalid arguments for bash: arguments are not valid JSON")
    sent = server.posts()[1]["json"]["messages"]  # the call goes back to the API with an object
    assert sent[1]["content"][-1]["input"] == {} and sent[2]["content"][0]["is_error"] is True


def test_an_html_page_with_status_200_is_an_infrastructure_failure(server, tmp_path):
    """Before: model_error, counted as the agent's outcome."""
    server.routes[("POST", "/v1/messages")] = Reply(200, text="<html><body><h1>502 Bad Gateway</h1></body></html>")
    run = ablate(server, tmp_path, "anthropic", "model.max_retries=2")
    assert run.returncode == 1, run.stderr[-2000:]
    assert not list(tmp_path.glob("smoke/*/record.json"))
    [(info, [call])] = incomplete(tmp_path)
    assert info["failure"]["kind"] == "infrastructure" and info["failure"]["cause"] == "api_outage"
    assert "NotAReply: status 200 with text/html" in info["failure"]["message"]
    assert len(call["failed_attempts"]) == 3 and len(server.posts()) == 3


def test_every_attempts_paid_tokens_are_in_the_records_cost(server, tmp_path):
    """Attempt 1: one paid reply, then 529s until it gives up; attempt 2 runs to the end. Before:
    the record's cost left attempt 1 out."""
    server.reply(steps=[body(sse(list_files(0)))])
    for _ in range(3):
        server.reply(529, error("overloaded_error", "Overloaded"))
    for i in range(1, 3):
        server.reply(steps=[body(sse(list_files(i)))])
    run = ablate(server, tmp_path, "anthropic", "model.max_retries=2", "retries=1", "budget.turns=2")
    assert run.returncode == 0, run.stderr[-2000:]
    rec, _ = record(tmp_path)
    assert rec["attempt"] == 2 and [f["cause"] for f in rec["failures"]] == ["api_outage"]
    one_reply = (100 * 10 + 20 * 50) / 1e6
    assert rec["usage"]["calls"] == 2 and rec["usage"]["cost_usd"] == pytest.approx(2 * one_reply)  # this attempt's
    paid = rec["usage"]["paid"]
    assert [row["attempt"] for row in paid["by_attempt"]] == [1, 2]
    assert paid["by_attempt"][0]["ended"] == "infrastructure: api_outage"
    assert paid["by_attempt"][0]["cost_usd"] == pytest.approx(one_reply)
    assert paid["total_tokens"] == 3 * 120 and paid["cost_usd"] == pytest.approx(3 * one_reply)


# --- OpenAI-compatible -------------------------------------------------------------------------

def test_keep_alive_comments_alone_are_a_stall_retried_and_recorded(server, tmp_path):
    server.reply(steps=chunks("hi")[:1] + [0.25, ": ping\n\n"] * 240)
    server.reply(steps=chunks(None, [tool_call('{"path": "."}', "call-1", "list_files")], "tool_calls"))
    run = ablate(server, tmp_path, "openai", "model.stream=true", "budget.turns=1", "model.timeout_s=2")
    assert run.returncode == 0, run.stderr[-2000:]
    rec, trial_dir = record(tmp_path)
    assert rec["end_reason"] == "turns" and rec["model"]["attempts"] == 2 and rec["model"]["retries"] == 1
    [call] = model_calls(trial_dir)
    assert call["failed_attempts"][0]["error"].startswith("StreamStalled")
    assert call["response"]["tool_calls"][0]["name"] == "list_files"


def test_a_stream_without_done_or_finish_reason_is_retried(server, tmp_path):
    reply = chunks(None, [tool_call('{"path": "."}', "call-1", "list_files")], "tool_calls")
    server.reply(steps=reply[:-1])  # everything but [DONE]
    server.reply(steps=reply[:2])  # cut before the finish_reason
    server.reply(steps=reply)
    run = ablate(server, tmp_path, "openai", "model.stream=true", "budget.turns=1")
    assert run.returncode == 0, run.stderr[-2000:]
    rec, trial_dir = record(tmp_path)
    assert rec["end_reason"] == "turns" and rec["model"]["attempts"] == 3
    [call] = model_calls(trial_dir)
    assert [f["error"].rsplit("without ", 1)[1] for f in call["failed_attempts"]] == ["[DONE]", "finish_reason and [DONE]"]
    assert rec["usage"]["paid"]["total_tokens"] > rec["usage"]["total_tokens"]  # the dropped requests, paid


def test_a_server_that_reports_no_usage_is_counted_and_held_to_the_token_budget(server, tmp_path):
    """Before: 0 tokens recorded, and a 2,000-token budget never ended the trial."""
    for i in range(60):
        reply = completion(None, [tool_call('{"path": "."}', f"call-{i}", "list_files")], "tool_calls")
        server.reply(200, {k: v for k, v in reply.items() if k != "usage"})
    run = ablate(server, tmp_path, "openai", "budget.tokens=40000", "model.price_per_mtok.input=1.0",
                 "model.price_per_mtok.output=2.0")
    assert run.returncode == 0, run.stderr[-2000:]
    rec, trial_dir = record(tmp_path)
    u = rec["usage"]
    assert rec["end_reason"] == "tokens" and 2 <= u["calls"] < 60
    assert u["total_tokens"] > 0 and u["estimated_tokens"] == u["total_tokens"] and u["estimated_by"] == TOKEN_ESTIMATE
    assert u["total_tokens"] <= 40000 * 1.05  # the budget held, give or take the growth of the last call
    assert u["cost_usd"] == pytest.approx((u["input_tokens"] * 1.0 + u["output_tokens"] * 2.0) / 1e6)
    first = model_calls(trial_dir)[0]["response"]["usage"]
    sent = server.posts()[0]["json"]
    assert first["input_tokens"] == -(-len((json.dumps(sent["messages"]) + json.dumps(sent["tools"])).encode()) // 3)


def test_an_html_page_is_an_infrastructure_failure_not_the_agents(server, tmp_path):
    server.routes[("POST", "/v1/chat/completions")] = Reply(200, text="<html>Service Unavailable</html>")
    run = ablate(server, tmp_path, "openai", "model.max_retries=1")
    assert run.returncode == 1, run.stderr[-2000:]
    assert not list(tmp_path.glob("smoke/*/record.json"))
    [(info, _)] = incomplete(tmp_path)
    assert info["failure"]["cause"] == "api_outage" and "NotAReply" in info["failure"]["message"]
