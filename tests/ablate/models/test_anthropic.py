"""The Anthropic provider against a local server speaking the Messages API's JSON shapes."""
from __future__ import annotations

import logging
import time

import pytest

from ablate.errors import AblateError
from ablate.models import STOP_REASONS, CallCut, Message, ProviderOutage, ToolCall, ToolSpec, deadline, get, preflight
from ablate.models._anthropic import AnthropicModel
from ablate.models._retry import ProviderError

from .conftest import Reply

PRICE = {"input": 10.0, "output": 50.0, "cache_read": 0.25, "cache_write": 12.5}
TOOLS = [ToolSpec("bash", "Run a shell command.", {"type": "object", "properties": {"command": {"type": "string"}}}),
         ToolSpec("submit", "Submit kernel.py.", {"type": "object", "properties": {}})]
THINKING = {"type": "thinking", "thinking": "The user wants a listing; call bash.",
            "signature": "EqQBCkgIARABGAIiQL1fh7c9JvXq2kVbZQ=="}
TEXT = {"type": "text", "text": "Let me look at the files."}
TOOL_USE = {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "bash", "input": {"command": "ls"}}


def message(content, stop="end_turn", usage=None):
    """A Messages API response body as the API sends it."""
    return {"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant", "model": "claude-fable-5-1",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": usage or {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 0,
                               "cache_read_input_tokens": 0, "service_tier": "standard"}}


def error(kind, msg):
    return {"type": "error", "error": {"type": kind, "message": msg}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}


@pytest.fixture
def cfg(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    return {"provider": "anthropic", "name": "fable-5.1", "id": "claude-fable-5-1", "max_tokens": 4096,
            "temperature": None, "thinking_budget": 0, "seed": None, "price_per_mtok": PRICE,
            "base_url": server.url, "max_retries": 3, "retry_base_s": 0.001, "timeout_s": 5}


def user(text="List the files."):
    return [Message("user", text)]


@pytest.mark.parametrize("api_stop,ours", [
    ("end_turn", "end"), ("stop_sequence", "end"), ("tool_use", "tool_use"), ("max_tokens", "max_tokens"),
    ("pause_turn", "pause"), ("refusal", "refusal"), ("model_context_window_exceeded", "context_exceeded")])
def test_every_stop_reason_is_normalised(server, cfg, api_stop, ours):
    server.reply(200, message([TEXT], api_stop))
    r = get(cfg).generate("sys", user(), TOOLS)
    assert r.stop_reason == ours and r.stop_reason in STOP_REASONS


def test_tool_use_round_trip_sends_thinking_back_verbatim(server, cfg):
    server.reply(200, message([THINKING, TEXT, TOOL_USE], "tool_use"))
    server.reply(200, message([{"type": "text", "text": "Done."}]))
    model = get(cfg)
    first = model.generate("sys", user(), TOOLS)
    assert first.stop_reason == "tool_use"
    assert first.text == TEXT["text"]
    assert first.tool_calls == [ToolCall(TOOL_USE["id"], "bash", {"command": "ls"})]
    assert first.raw == [THINKING, TEXT, TOOL_USE]

    history = user() + [first.as_message(), Message("tool", "kernel.py\n", tool_call_id=TOOL_USE["id"])]
    second = model.generate("sys", history, TOOLS)
    assert second.text == "Done." and second.stop_reason == "end"
    sent = server.posts()[1]["json"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == [THINKING, TEXT, TOOL_USE]  # byte for byte, signature included
    result = sent[2]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == TOOL_USE["id"]
    assert result["content"] == "kernel.py\n" and result["is_error"] is False


def test_consecutive_tool_results_become_one_user_turn_results_first(server, cfg):
    server.reply(200, message([TEXT]))
    calls = [ToolCall("toolu_a", "bash", {"command": "ls"}), ToolCall("toolu_b", "bash", {"command": "nvcc"})]
    history = user() + [Message("assistant", "", tool_calls=calls),
                        Message("tool", "a.py", tool_call_id="toolu_a"),
                        Message("tool", "nvcc: not found", tool_call_id="toolu_b", is_error=True),
                        Message("user", "You have 3 turns left.")]
    get(cfg).generate("sys", history, TOOLS)
    sent = server.posts()[0]["json"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    # built from tool_calls when the message has no provider blocks
    assert sent[1]["content"] == [{"type": "tool_use", "id": "toolu_a", "name": "bash", "input": {"command": "ls"}},
                                  {"type": "tool_use", "id": "toolu_b", "name": "bash", "input": {"command": "nvcc"}}]
    blocks = sent[2]["content"]
    assert [b["type"] for b in blocks] == ["tool_result", "tool_result", "text"]
    assert [b["tool_use_id"] for b in blocks[:2]] == ["toolu_a", "toolu_b"]
    assert [b["is_error"] for b in blocks[:2]] == [False, True]


def test_prompt_caching_marks_tools_system_and_newest_user_turn(server, cfg):
    server.reply(200, message([TEXT]))
    get(cfg).generate("You write GPU kernels.", user(), TOOLS)
    body = server.posts()[0]["json"]
    assert body["system"] == [{"type": "text", "text": "You write GPU kernels.", "cache_control": {"type": "ephemeral"}}]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][0]["input_schema"] == TOOLS[0].parameters
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["model"] == "claude-fable-5-1" and body["max_tokens"] == 4096


def test_caching_marker_does_not_leak_into_the_callers_messages(server, cfg):
    server.reply(200, message([TEXT]))
    server.reply(200, message([TEXT]))
    model = get(cfg)
    history = user()
    model.generate("sys", history, TOOLS)
    history += [Message("assistant", "ok"), Message("user", "next")]
    model.generate("sys", history, TOOLS)
    second = server.posts()[1]["json"]["messages"]
    assert "cache_control" not in second[0]["content"][-1]  # only the newest user turn is marked
    assert second[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_default_request_sends_no_thinking_effort_or_temperature(server, cfg):
    server.reply(200, message([TEXT]))
    get(cfg).generate("sys", user(), TOOLS)
    body = server.posts()[0]["json"]
    assert not {"thinking", "output_config", "temperature"} & body.keys()


@pytest.mark.parametrize("extra,expect", [
    ({"thinking_budget": 2048}, {"thinking": {"type": "enabled", "budget_tokens": 2048}}),
    ({"thinking": "adaptive", "effort": "high"}, {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}),
    ({"temperature": 0.2}, {"temperature": 0.2}),
])
def test_thinking_effort_and_temperature_reach_the_request(server, cfg, extra, expect):
    server.reply(200, message([TEXT]))
    get(cfg | extra).generate("sys", user(), TOOLS)
    body = server.posts()[0]["json"]
    assert {k: body[k] for k in expect} == expect


@pytest.mark.parametrize("extra,words", [
    ({"thinking_budget": 512}, "thinking_budget must be >= 1024"),
    ({"thinking_budget": 4096}, r"below max_tokens \(4096\)"),
    ({"thinking": "adaptive", "thinking_budget": 2048}, "not both"),
    ({"thinking": "sometimes"}, "thinking must be adaptive, disabled or null"),
    ({"seed": 1}, "takes no seed"),
    ({"price_per_mtok": {"input": 1, "output": 5}}, "needs price_per_mtok.cache_read"),
    ({"id": None}, "needs an id"),
])
def test_bad_config_is_one_clear_error(cfg, extra, words):
    with pytest.raises(AblateError, match=words):
        get(cfg | extra)


def test_usage_and_cost_include_cache_tokens(server, cfg):
    usage = {"input_tokens": 1200, "output_tokens": 800, "cache_creation_input_tokens": 3000,
             "cache_read_input_tokens": 50000, "cache_creation": {"ephemeral_5m_input_tokens": 3000,
                                                                  "ephemeral_1h_input_tokens": 0}}
    server.reply(200, message([TEXT], usage=usage))
    r = get(cfg).generate("sys", user(), TOOLS)
    u = r.usage
    assert (u.input_tokens, u.output_tokens, u.cache_write_tokens, u.cache_read_tokens, u.calls) == (1200, 800, 3000, 50000, 1)
    expected = (1200 * 10.0 + 800 * 50.0 + 3000 * 12.5 + 50000 * 0.25) / 1e6
    assert u.cost_usd == pytest.approx(expected)
    assert u.total_tokens == 1200 + 800 + 3000 + 50000


def test_429_then_529_then_success_is_retried_and_counted(server, cfg, caplog):
    server.reply(429, error("rate_limit_error", "Number of request tokens has exceeded your rate limit"),
                 headers={"retry-after": "0"})
    server.reply(529, error("overloaded_error", "Overloaded"))
    server.reply(200, message([TEXT]))
    model = get(cfg)
    with caplog.at_level(logging.WARNING, logger="ablate.models"):
        r = model.generate("sys", user(), TOOLS)
    assert r.text == TEXT["text"]
    assert len(server.posts()) == 3 and model.attempts == 3
    logged = " ".join(rec.getMessage() for rec in caplog.records)
    assert "429 rate_limit_error" in logged and "529 overloaded_error" in logged and "retry 2/3" in logged


def test_retries_run_out_with_one_clear_error(server, cfg):
    for _ in range(4):
        server.reply(529, error("overloaded_error", "Overloaded"))
    model = get(cfg | {"max_retries": 2})
    with pytest.raises(ProviderError, match=r"gave up after 3 attempts; last error: 529 overloaded_error: Overloaded"):
        model.generate("sys", user(), TOOLS)
    assert len(server.posts()) == 3 and model.attempts == 3


def test_500_and_timeout_are_retried(server, cfg):
    server.reply(500, error("api_error", "Internal server error"))
    server.reply(200, message([TEXT]), delay_s=1.5)  # the client gives up after 0.3 s
    server.reply(200, message([TEXT]))
    model = get(cfg | {"timeout_s": 0.3})
    assert model.generate("sys", user(), TOOLS).text == TEXT["text"]
    assert model.attempts == 3


def test_bad_key_is_not_retried(server, cfg):
    server.reply(401, error("authentication_error", "invalid x-api-key"))
    with pytest.raises(ProviderError, match=r"^ANTHROPIC_API_KEY was rejected \(401\)"):
        get(cfg).generate("sys", user(), TOOLS)
    assert len(server.posts()) == 1


def test_prompt_too_long_ends_with_context_exceeded(server, cfg):
    server.reply(400, error("invalid_request_error", "prompt is too long: 1000437 tokens > 1000000 maximum"))
    r = get(cfg).generate("sys", user(), TOOLS)
    assert r.stop_reason == "context_exceeded" and r.tool_calls == [] and r.usage.calls == 1


def test_other_bad_request_names_the_api_message(server, cfg):
    server.reply(400, error("invalid_request_error", "`temperature` is deprecated for this model."))
    with pytest.raises(ProviderError, match="400 invalid_request_error: `temperature` is deprecated"):
        get(cfg | {"temperature": 0.5}).generate("sys", user(), TOOLS)
    assert len(server.posts()) == 1


def test_tool_input_that_is_not_an_object_becomes_a_parse_error(server, cfg):
    bad = dict(TOOL_USE, input=["ls"])
    server.reply(200, message([bad], "tool_use"))
    r = get(cfg).generate("sys", user(), TOOLS)
    (call,) = r.tool_calls
    assert call.arguments == {} and "must be a JSON object" in call.parse_error


def test_max_cost_bounds_the_call_and_grows_with_the_prompt(server, cfg):
    model = get(cfg)
    short = model.max_cost_of_next_call("sys", user(), TOOLS)
    assert short >= 4096 * 50.0 / 1e6  # max_tokens of output at least
    long = model.max_cost_of_next_call("sys", user("x" * 30000), TOOLS)
    # 30000 chars ~ 10000 tokens at the dearer of input (10) and cache-write (12.5) prices
    assert long - short == pytest.approx((30000 - len("List the files.")) / 3 * 12.5 / 1e6, rel=0.01)
    usage = {"input_tokens": 10, "output_tokens": 4096, "cache_creation_input_tokens": 9000,
             "cache_read_input_tokens": 0}
    server.reply(200, message([TEXT], "max_tokens", usage=usage))
    assert model.generate("sys", user("x" * 30000), TOOLS).usage.cost_usd <= long


# --- streaming -------------------------------------------------------------------------------

def sse(msg):
    """The server-sent events the Messages API streams for a response."""
    start = dict(msg, content=[], stop_reason=None, usage=dict(msg["usage"], output_tokens=1))
    events = [("message_start", {"type": "message_start", "message": start})]
    for i, b in enumerate(msg["content"]):
        if b["type"] == "thinking":
            first, deltas = {"type": "thinking", "thinking": "", "signature": ""}, [
                {"type": "thinking_delta", "thinking": b["thinking"]}, {"type": "signature_delta", "signature": b["signature"]}]
        elif b["type"] == "text":
            first, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": b["text"]}]
        else:
            import json
            first, deltas = dict(b, input={}), [{"type": "input_json_delta", "partial_json": json.dumps(b["input"])}]
        events.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": first}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                                     "usage": {"output_tokens": msg["usage"]["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def test_streaming_gives_the_same_response_and_blocks(server, cfg):
    server.reply(200, sse(message([THINKING, TEXT, TOOL_USE], "tool_use")), sse=True)
    r = get(cfg | {"stream": True}).generate("sys", user(), TOOLS)
    assert server.posts()[0]["json"]["stream"] is True
    assert r.stop_reason == "tool_use" and r.text == TEXT["text"]
    assert r.tool_calls == [ToolCall(TOOL_USE["id"], "bash", {"command": "ls"})]
    assert r.raw == [THINKING, TEXT, TOOL_USE]
    assert (r.usage.input_tokens, r.usage.output_tokens) == (100, 20)


def test_streaming_overloaded_mid_stream_is_retried(server, cfg):
    events = sse(message([TEXT]))[:2] + [("error", error("overloaded_error", "Overloaded"))]
    server.reply(200, events, sse=True)
    server.reply(200, sse(message([TEXT])), sse=True)
    model = get(cfg | {"stream": True})
    assert model.generate("sys", user(), TOOLS).text == TEXT["text"]
    assert model.attempts == 2


# --- preflight -------------------------------------------------------------------------------

MODEL_INFO = {"type": "model", "id": "claude-fable-5-1", "display_name": "Claude Fable 5.1",
              "created_at": "2026-09-01T00:00:00Z", "lifecycle": "active", "max_input_tokens": 1000000,
              "max_tokens": 128000}


def test_preflight_passes_and_checks_the_model_id(server, cfg):
    server.reply(200, MODEL_INFO)
    preflight(cfg)
    (req,) = server.requests
    assert req["method"] == "GET" and req["path"] == "/v1/models/claude-fable-5-1"
    assert req["headers"]["authorization"] == "Bearer sk-ant-test"  # the key from the environment


def test_preflight_without_key_names_the_variable_and_the_fix(cfg, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(AblateError) as e:
        preflight(cfg)
    assert str(e.value) == ("model fable-5.1 needs ANTHROPIC_API_KEY in the environment "
                            "(or use +model=scripted to run offline)")


def test_preflight_without_network_names_the_url(cfg, closed_url):
    with pytest.raises(AblateError, match=rf"^cannot reach the Anthropic API at {closed_url}"):
        preflight(cfg | {"base_url": closed_url})


@pytest.mark.parametrize("status,body,words", [
    (401, error("authentication_error", "invalid x-api-key"), r"^ANTHROPIC_API_KEY was rejected \(401\)"),
    (404, error("not_found_error", "model: fable-5.1"), r"model id 'claude-fable-5-1' is unknown .* \(404\)"),
    (200, dict(MODEL_INFO, max_tokens=2048), r"max_tokens=4096 exceeds claude-fable-5-1's limit of 2048"),
    (200, dict(MODEL_INFO, lifecycle="retired"), "is retired"),
])
def test_preflight_failures_are_one_line(server, cfg, status, body, words):
    server.reply(status, body)
    with pytest.raises(AblateError, match=words) as e:
        preflight(cfg)
    assert "\n" not in str(e.value)


def test_registry_builds_the_provider(cfg):
    model = get(cfg)
    assert isinstance(model, AnthropicModel) and model.id == "claude-fable-5-1"


# --- replies that do not arrive whole: the infrastructure's, retried; what they used is kept ----

PING = ("ping", {"type": "ping"})


def body(events):
    """A stream's body as the API writes it."""
    import json
    return "".join(f"event: {ev}\ndata: {json.dumps(data)}\n\n" for ev, data in events)


def test_a_stream_of_pings_alone_is_a_stall_and_is_retried(server, cfg):
    started = sse(message([TEXT]))[:1]  # message_start: the input is paid from here on
    server.reply(steps=[body(started)] + [0.1, body([PING])] * 100)  # 10 s of pings unless the client leaves
    server.reply(steps=[body(sse(message([TEXT])))])
    model = get(cfg | {"stream": True, "timeout_s": 1.0})
    t = time.monotonic()
    r = model.generate("sys", user(), TOOLS)
    assert time.monotonic() - t < 5  # not the 10 s the pings would have lasted
    assert r.text == TEXT["text"] and model.attempts == 2
    (stall,) = r.failed_attempts
    assert stall.error.startswith("StreamStalled: the reply stalled: no content for 1.")
    assert stall.charged_to == "infrastructure" and stall.usage.input_tokens == 100  # message_start's, paid


def test_a_stream_cut_before_message_stop_is_retried_not_taken_as_an_end(server, cfg):
    events = sse(message([TEXT]))
    for cut in (2, 4, len(events) - 1):  # after the block started, mid-text, just before message_stop
        server.reply(steps=[body(events[:cut])])
    server.reply(steps=[body(events)])
    model = get(cfg | {"stream": True})
    r = model.generate("sys", user(), TOOLS)
    assert r.stop_reason == "end" and model.attempts == 4
    assert [f.error.split(":")[0] for f in r.failed_attempts] == ["StreamDropped"] * 3
    assert all(f.usage.input_tokens == 100 and f.usage.cost_usd > 0 for f in r.failed_attempts)
    # output: counted from the text that arrived until message_delta reports it (the last cut had it)
    assert [f.usage.estimated_tokens > 0 for f in r.failed_attempts] == [True, True, False]


def test_malformed_streamed_tool_json_goes_back_to_the_model_and_the_call_is_paid(server, cfg):
    events = [(ev, dict(d, delta={"type": "input_json_delta", "partial_json": '{"command": "ls"'}))
              if d.get("delta", {}).get("type") == "input_json_delta" else (ev, d)
              for ev, d in sse(message([TEXT, TOOL_USE], "tool_use"))]
    server.reply(steps=[body(events)])
    server.reply(steps=[body(sse(message([TEXT])))])
    model = get(cfg | {"stream": True})
    r = model.generate("sys", user(), TOOLS)
    (call,) = r.tool_calls
    assert call.arguments == {} and call.parse_error.startswith("arguments are not valid JSON")
    assert '{"command": "ls"' in call.parse_error and r.stop_reason == "tool_use"
    assert r.usage.calls == 1 and r.usage.cost_usd > 0 and model.attempts == 1
    history = user() + [r.as_message(), Message("tool", call.parse_error, tool_call_id=call.id, is_error=True)]
    model.generate("sys", history, TOOLS)
    sent = server.posts()[1]["json"]["messages"]
    assert sent[1]["content"][1] == dict(TOOL_USE, input={})  # the API takes the call back with an object
    assert sent[2]["content"][0]["is_error"] is True


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("reply", [{"text": "<html><body>502 Bad Gateway</body></html>"},
                                   {"text": "{not json", "content_type": "application/json"},
                                   {"body": {"ok": True}}])
def test_a_2xx_reply_that_is_not_the_apis_is_retried(server, cfg, stream, reply):
    server.reply(200, **reply)
    if stream:
        server.reply(steps=[body(sse(message([TEXT])))])
    else:
        server.reply(200, message([TEXT]))
    model = get(cfg | {"stream": stream})
    r = model.generate("sys", user(), TOOLS)
    assert r.text == TEXT["text"] and model.attempts == 2
    assert r.failed_attempts[0].error.startswith("NotAReply")


def test_a_2xx_reply_that_is_never_the_apis_is_an_outage(server, cfg):
    server.routes[("POST", "/v1/messages")] = Reply(200, text="<html>captive portal</html>")
    model = get(cfg | {"stream": True, "max_retries": 2})
    with pytest.raises(ProviderOutage, match="gave up after 3 attempts; last error: NotAReply: status 200 with "
                                             "text/html") as e:
        model.generate("sys", user(), TOOLS)
    assert len(e.value.failed_attempts) == 3 and model.attempts == 3


def test_an_error_event_after_message_start_keeps_what_was_paid(server, cfg):
    events = sse(message([TEXT]))[:2] + [("error", error("overloaded_error", "Overloaded"))]
    server.reply(steps=[body(events)])
    server.reply(steps=[body(sse(message([TEXT])))])
    r = get(cfg | {"stream": True}).generate("sys", user(), TOOLS)
    (failed,) = r.failed_attempts
    assert "overloaded_error" in failed.error and failed.usage.input_tokens == 100


def test_no_retry_starts_after_the_wall_deadline(server, cfg):
    server.routes[("POST", "/v1/messages")] = Reply(529, error("overloaded_error", "Overloaded"))
    model = get(cfg | {"max_retries": 50, "retry_base_s": 0.3, "retry_max_s": 0.3})
    t = time.monotonic()
    with deadline(t + 1.0), pytest.raises(ProviderOutage, match="the trial's wall budget ends before another"):
        model.generate("sys", user(), TOOLS)
    assert time.monotonic() - t < 1.0 + 1.0  # by the deadline, not 50 retries later
    assert 2 <= model.attempts < 50


def test_a_reply_still_arriving_at_the_deadline_is_cut_and_the_agent_pays(server, cfg):
    start, block = sse(message([TEXT]))[:2]
    delta = ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "more words "}})
    server.reply(steps=[body([start, block])] + [0.1, body([delta])] * 100)  # 10 s of text
    model = get(cfg | {"stream": True})
    t = time.monotonic()
    with deadline(t + 1.0), pytest.raises(CallCut, match="wall budget ran out while the reply was arriving") as e:
        model.generate("sys", user(), TOOLS)
    assert time.monotonic() - t < 1.0 + cfg["timeout_s"]
    assert e.value.usage.input_tokens == 100 and e.value.usage.output_tokens > 0 and e.value.usage.calls == 1
    assert [f.charged_to for f in e.value.failed_attempts] == ["agent"]


def test_a_deadline_reached_while_retrying_is_an_outage_not_the_agents(server, cfg):
    started = sse(message([TEXT]))[:1]
    server.routes[("POST", "/v1/messages")] = Reply(steps=[body(started)] + [0.1, body([PING])] * 100)
    model = get(cfg | {"stream": True, "timeout_s": 0.6, "max_retries": 50})
    t = time.monotonic()
    with deadline(t + 1.5), pytest.raises(ProviderOutage, match="wall budget") as e:
        model.generate("sys", user(), TOOLS)
    assert time.monotonic() - t < 1.5 + 0.6 + 1.0
    assert all(f.charged_to == "infrastructure" for f in e.value.failed_attempts)
    assert "StreamStalled" in e.value.failed_attempts[0].error
