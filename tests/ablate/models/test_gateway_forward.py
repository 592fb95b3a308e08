"""The gateway forwarding to a provider, with the provider tests' stand-in server as the upstream (so
it lives beside them): what reaches the provider is the trial's model, settings and key, without
provider-side tools; what comes back reaches the agent as it was sent, streamed or not, and is
recorded and counted; a provider outage reaches the agent as one (it retries) and costs no turn."""
import http.client
import json
import shutil
import socket
import tempfile

import pytest

from ablate.gateway import Gateway, Meter, policy_for
from harnesses import Budget

PRICE = {"input": 10.0, "output": 50.0, "cache_read": 0.25, "cache_write": 12.5}
KEY = "sk-ant-held-outside"


class Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("gateway", timeout=30)
        self.unix = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.unix)


def post(sock, path, body, headers=None):
    c = Unix(sock)
    c.request("POST", path, json.dumps(body).encode(), {"content-type": "application/json", **(headers or {})})
    r = c.getresponse()
    raw, ctype = r.read(), r.getheader("content-type", "")
    c.close()
    return r.status, ctype, raw


def events(raw: bytes):
    return [json.loads(line[5:]) for line in raw.decode().splitlines()
            if line.startswith("data:") and line[5:].strip() != "[DONE]"]


@pytest.fixture
def gateway(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_KEY_FOR_TEST", "sk-openai-held-outside")
    made = []

    def start(provider="anthropic", budget=Budget(turns=10), **extra):
        cfg = {"provider": provider, "name": "m", "id": "claude-fable-5-1" if provider == "anthropic" else "qwen-coder",
               "max_tokens": 4096, "price_per_mtok": PRICE, "base_url": server.url if provider == "anthropic"
               else f"{server.url}/v1", "api_key_env": "ANTHROPIC_API_KEY" if provider == "anthropic"
               else "OPENAI_KEY_FOR_TEST", "timeout_s": 10, **extra}
        calls, meter = [], Meter(budget, PRICE)
        g = Gateway(policy_for(cfg), meter, on_call=calls.append)
        d = tempfile.mkdtemp(prefix="gwf")
        made.append((g, d))
        return g.serve_unix(f"{d}/g.sock"), calls, meter

    yield start
    for g, d in made:
        g.close()
        shutil.rmtree(d, ignore_errors=True)


MESSAGE = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-fable-5-1",
           "content": [{"type": "text", "text": "Looking."},
                       {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}],
           "stop_reason": "tool_use", "stop_sequence": None,
           "usage": {"input_tokens": 1000, "output_tokens": 200, "cache_creation_input_tokens": 300,
                     "cache_read_input_tokens": 4000}}


def agent_request(stream=False):
    """What Claude Code might send, and what it must not get: another model, a huge reply, a web
    search run by the provider, a remote MCP server, its own key."""
    return {"model": "claude-opus-5-5", "max_tokens": 128000, "stream": stream,
            "messages": [{"role": "user", "content": "list the files"}],
            "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "mcp_servers": [{"type": "url", "url": "https://example.com/mcp", "name": "x"}]}


def test_the_provider_gets_the_trials_model_settings_and_key_and_no_provider_side_tools(server, gateway):
    sock, calls, meter = gateway(thinking="adaptive", effort="high")
    server.reply(200, MESSAGE)
    status, _, raw = post(sock, "/v1/messages?beta=true", agent_request(),
                          {"x-api-key": "agent-made-up", "anthropic-beta": "context-management-2025-06-27"})
    assert status == 200 and json.loads(raw) == MESSAGE  # the reply as the provider sent it
    (req,) = server.posts()
    sent = req["json"]
    assert req["path"] == "/v1/messages" and req["headers"]["x-api-key"] == KEY
    assert req["headers"]["anthropic-beta"] == "context-management-2025-06-27"
    assert sent["model"] == "claude-fable-5-1" and sent["max_tokens"] == 4096
    assert sent["thinking"] == {"type": "adaptive"} and sent["output_config"] == {"effort": "high"}
    assert [t["name"] for t in sent["tools"]] == ["Bash"] and "mcp_servers" not in sent
    (call,) = calls
    assert call["request"]["overridden"]["model"] == "claude-opus-5-5"
    assert call["request"]["overridden"]["tools_removed"] == ["web_search_20250305"]
    u = call["response"]["usage"]
    assert (u["input_tokens"], u["output_tokens"], u["cache_read_tokens"], u["cache_write_tokens"]) == (1000, 200, 4000, 300)
    assert u["cost_usd"] == pytest.approx((1000 * 10 + 200 * 50 + 4000 * 0.25 + 300 * 12.5) / 1e6)
    assert meter.turns == 1 and meter.usage.cost_usd == pytest.approx(u["cost_usd"])
    assert call["response"]["tool_calls"] == [{"id": "toolu_1", "name": "Bash", "arguments": {"command": "ls"},
                                               "parse_error": None}]


def anthropic_stream():
    start = {**MESSAGE, "content": [], "stop_reason": None,
             "usage": {"input_tokens": 1000, "output_tokens": 1, "cache_creation_input_tokens": 300,
                       "cache_read_input_tokens": 4000}}
    return [("message_start", {"type": "message_start", "message": start}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ("ping", {"type": "ping"}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Look"}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ing."}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("content_block_start", {"type": "content_block_start", "index": 1,
                                     "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                     "delta": {"type": "input_json_delta", "partial_json": '{"comm'}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                     "delta": {"type": "input_json_delta", "partial_json": 'and": "ls"}'}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 1}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                               "usage": {"output_tokens": 200}}),
            ("message_stop", {"type": "message_stop"})]


def test_an_anthropic_stream_reaches_the_agent_event_by_event_and_is_recorded_whole(server, gateway):
    sock, calls, meter = gateway()
    server.reply(200, anthropic_stream(), sse=True)
    status, ctype, raw = post(sock, "/v1/messages", agent_request(stream=True))
    assert status == 200 and "text/event-stream" in ctype
    assert events(raw) == [data for _, data in anthropic_stream()]  # every event, in order, unchanged
    body = calls[0]["response"]["body"]
    assert body["content"] == MESSAGE["content"] and body["stop_reason"] == "tool_use"
    assert calls[0]["response"]["usage"]["output_tokens"] == 200 and calls[0]["response"]["usage"]["input_tokens"] == 1000
    assert meter.usage.total_tokens == 1000 + 200 + 4000 + 300


def test_openai_chat_streams_are_asked_for_their_usage_and_counted(server, gateway):
    sock, calls, meter = gateway("openai", seed=7, temperature=0.5)
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "qwen-coder"}
    chunks = [(None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": None}]}),
              (None, {**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                                                  "function": {"name": "bash", "arguments": "{\"command\":"}}]},
                                           "finish_reason": None}]}),
              (None, {**base, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": " \"ls\"}"}}]},
                                           "finish_reason": "tool_calls"}]}),
              (None, {**base, "choices": [], "usage": {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520,
                                                       "prompt_tokens_details": {"cached_tokens": 100}}})]
    server.reply(200, chunks, sse=True)
    status, _, raw = post(sock, "/v1/chat/completions", {"model": "gpt-x", "stream": True, "max_tokens": 10 ** 9,
                                                         "messages": [{"role": "user", "content": "hi"}],
                                                         "tools": [{"type": "function", "function": {"name": "bash"}}],
                                                         "web_search_options": {}})
    assert status == 200 and len(events(raw)) == 4
    (req,) = server.posts()
    sent = req["json"]
    assert req["path"] == "/v1/chat/completions" and req["headers"]["authorization"] == "Bearer sk-openai-held-outside"
    assert sent["model"] == "qwen-coder" and sent["max_tokens"] == 4096 and sent["seed"] == 7 and sent["temperature"] == 0.5
    assert sent["stream_options"] == {"include_usage": True} and "web_search_options" not in sent
    r = calls[0]["response"]
    assert r["tool_calls"][0]["name"] == "bash" and r["tool_calls"][0]["arguments"] == {"command": "ls"}
    assert (r["usage"]["input_tokens"], r["usage"]["cache_read_tokens"], r["usage"]["output_tokens"]) == (400, 100, 20)


def test_openai_responses_streams_are_counted_and_hosted_tools_and_stored_state_removed(server, gateway):
    sock, calls, meter = gateway("openai")
    done = {"id": "resp_1", "object": "response", "status": "completed", "model": "qwen-coder",
            "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec_command",
                        "arguments": "{\"cmd\": \"ls\"}", "status": "completed"}],
            "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 30,
                      "output_tokens_details": {"reasoning_tokens": 10}, "total_tokens": 930}}
    stream = [("response.created", {"type": "response.created", "response": {**done, "status": "in_progress", "output": []}}),
              ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": done["output"][0]}),
              ("response.completed", {"type": "response.completed", "response": done})]
    server.reply(200, stream, sse=True)
    status, _, raw = post(sock, "/v1/responses", {
        "model": "gpt-5.5", "stream": True, "input": "hi", "store": True, "previous_response_id": "resp_someone_elses",
        "tools": [{"type": "function", "name": "exec_command"}, {"type": "custom", "name": "apply_patch"},
                  {"type": "web_search"}, {"type": "mcp", "server_url": "https://example.com"},
                  {"type": "tool_search", "execution": "client"}, {"type": "tool_search", "execution": "server"}]})
    assert status == 200 and [e["type"] for e in events(raw)] == [e for e, _ in stream]
    sent = server.posts()[0]["json"]
    assert [t["type"] for t in sent["tools"]] == ["function", "custom", "tool_search"]
    assert sent["store"] is False and "previous_response_id" not in sent and sent["max_output_tokens"] == 4096
    assert calls[0]["response"]["usage"]["output_tokens"] == 30 and meter.turns == 1
    assert calls[0]["response"]["tool_calls"][0]["name"] == "exec_command"


def test_a_provider_outage_reaches_the_agent_so_it_retries_and_costs_no_turn(server, gateway, closed_url):
    sock, calls, meter = gateway()
    server.reply(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    status, _, raw = post(sock, "/v1/messages", agent_request())
    assert status == 529 and json.loads(raw)["error"]["type"] == "overloaded_error"
    assert calls[0]["response"]["failure"] == "outage" and meter.turns == 0 and meter.usage.total_tokens == 0
    server.reply(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})
    assert post(sock, "/v1/messages", agent_request())[0] == 400 and calls[1]["response"]["failure"] == "rejected"
    down_sock, down_calls, _ = gateway(base_url=closed_url)
    status, _, raw = post(down_sock, "/v1/messages", agent_request())
    assert status == 502 and "could not reach the model" in json.loads(raw)["error"]["message"]
    assert KEY not in raw.decode() and down_calls[0]["response"]["failure"] == "outage"


def test_a_max_tokens_the_agent_makes_up_is_refused_not_forwarded(server, gateway):
    sock, calls, _ = gateway()
    status, _, raw = post(sock, "/v1/messages", {**agent_request(), "max_tokens": "lots"})
    assert status == 400 and "max_tokens must be a positive integer" in json.loads(raw)["error"]["message"]
    assert server.posts() == [] and calls == []


def test_forwarding_needs_the_key_in_the_runners_environment(monkeypatch):
    from ablate.errors import AblateError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(AblateError, match="needs ANTHROPIC_API_KEY in the environment"):
        policy_for({"provider": "anthropic", "id": "claude-fable-5-1", "name": "fable"})
