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
from ablate.harnesses import Budget

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


def test_a_file_stored_at_the_provider_is_not_reachable_through_the_gateway(server, gateway):
    sock, calls, _ = gateway()
    body = agent_request()
    body["messages"] = [{"role": "user", "content": [{"type": "document", "source": {"type": "file", "file_id": "file_011"}}]}]
    status, _, raw = post(sock, "/v1/messages", body)
    assert status == 400 and "file_id names a file stored at the provider" in json.loads(raw)["error"]["message"]
    assert server.posts() == [] and calls == []


def test_forwarding_needs_the_key_in_the_runners_environment(monkeypatch):
    from ablate.errors import AblateError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(AblateError, match="needs ANTHROPIC_API_KEY in the environment"):
        policy_for({"provider": "anthropic", "id": "claude-fable-5-1", "name": "fable"})


# -- the real CLIs through the gateway to the stand-in API: a real-key run, but for the key ----------
def _clis():
    import os

    from ablate.harnesses import agents

    missing = [n for n in agents.PINNED if agents.installed(n) is None]
    if missing:
        why = f"{', '.join(missing)} not installed; `python -m ablate.harnesses.agents install` installs them"
        if os.environ.get("ABLATE_REQUIRE_AGENTS") == "1":
            pytest.fail(why)
        pytest.skip(why)


def _kernel() -> str:
    from ablate.harnesses.scripted import render, template

    source, configs = template("rmsnorm")
    return render(source, configs[0])


def _trial(tmp_path, agent, model):
    from ablate.store import Store
    from ablate.trial import TrialSpec, run_trial

    spec = TrialSpec(study="forward", arm=agent, operator="rmsnorm", shapes={"public": "smoke", "eval": "smoke"}, seed=0,
                     harness={"name": agent, "mechanisms": {}, "agent": {"name": agent}}, model=model, budget={"turns": 10})
    trial = run_trial(spec, Store(tmp_path / "store"))
    return json.loads((trial / "record.json").read_text()), [json.loads(x) for x in (trial / "model_calls.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_claude_code_through_the_gateway_to_a_stand_in_anthropic_api(server, monkeypatch, tmp_path):
    from ablate.gateway import _wire

    _clis()
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    write = {**MESSAGE, "content": [{"type": "tool_use", "id": "toolu_w", "name": "Write",
                                     "input": {"file_path": "/workspace/kernel.py", "content": _kernel()}}]}
    done = {**MESSAGE, "content": [{"type": "text", "text": "kernel.py is written."}], "stop_reason": "end_turn"}
    for body in (write, done):
        server.reply(200, _wire.events_of("anthropic", body), sse=True)
    model = {"provider": "anthropic", "name": "stand-in", "id": "claude-fable-5-1", "max_tokens": 4096,
             "price_per_mtok": PRICE, "base_url": server.url, "api_key_env": "ANTHROPIC_API_KEY", "timeout_s": 60}
    rec, made = _trial(tmp_path, "claude_code", model)
    assert rec["end_reason"] == "submitted" and rec["evaluation"]["verdict"] == "accepted"
    posts = server.posts()
    assert len(posts) == len(made) == 2 and all(p["headers"]["x-api-key"] == KEY for p in posts)
    assert all(p["json"]["model"] == "claude-fable-5-1" and p["json"]["max_tokens"] == 4096 for p in posts)
    assert all(not {"WebSearch", "WebFetch"} & {t.get("name") for t in p["json"]["tools"]} for p in posts)
    results = [b for m in posts[1]["json"]["messages"] if isinstance(m["content"], list) for b in m["content"]
               if b.get("type") == "tool_result"]
    assert [b["tool_use_id"] for b in results] == ["toolu_w"] and not results[0].get("is_error")  # its Write ran
    per_call = (1000 * 10 + 200 * 50 + 4000 * 0.25 + 300 * 12.5) / 1e6
    assert rec["usage"]["cost_usd"] == pytest.approx(2 * per_call) and rec["usage"]["total_tokens"] == 2 * 5500
    assert rec["model"]["attempts"] == 2 and made[0]["response"]["tool_calls"][0]["name"] == "Write"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_codex_through_the_gateway_to_a_stand_in_responses_api(server, monkeypatch, tmp_path):
    from ablate.gateway import _wire

    _clis()
    monkeypatch.setenv("OPENAI_KEY_FOR_TEST", "sk-openai-held-outside")
    usage = {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 100}, "output_tokens": 30,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 930}
    command = "cat > kernel.py <<'EOF'\n" + _kernel() + "\nEOF"
    call = {"id": "resp_1", "object": "response", "status": "completed", "model": "qwen-coder", "usage": usage,
            "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_w", "name": "exec_command",
                        "arguments": json.dumps({"cmd": command}), "status": "completed"}]}
    done = {**call, "id": "resp_2", "output": [{"type": "message", "id": "m_1", "role": "assistant", "status": "completed",
                                                 "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}]}
    for body in (call, done):
        server.reply(200, _wire.events_of("responses", body), sse=True)
    model = {"provider": "openai", "name": "stand-in", "id": "qwen-coder", "max_tokens": 4096, "price_per_mtok": PRICE,
             "base_url": f"{server.url}/v1", "api_key_env": "OPENAI_KEY_FOR_TEST", "timeout_s": 60}
    rec, made = _trial(tmp_path, "codex", model)
    assert rec["end_reason"] == "submitted" and rec["evaluation"]["verdict"] == "accepted"
    posts = server.posts()
    assert [p["path"] for p in posts] == ["/v1/responses"] * 2 == ["/v1/responses"] * len(made)
    assert all(p["headers"]["authorization"] == "Bearer sk-openai-held-outside" for p in posts)
    assert all(p["json"]["model"] == "qwen-coder" and p["json"]["max_output_tokens"] == 4096 for p in posts)
    outputs = [i for i in posts[1]["json"]["input"] if i.get("type") == "function_call_output"]
    assert outputs and outputs[0]["call_id"] == "call_w"  # its shell ran the command
    assert rec["usage"]["cache_read_tokens"] == 200 and rec["usage"]["output_tokens"] == 60
