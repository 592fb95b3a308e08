"""The OpenAI-compatible provider against a local server speaking chat.completions JSON."""
from __future__ import annotations

import json
import re
import time

import pytest

from ablate.errors import AblateError
from ablate.models import Message, ProviderOutage, ToolCall, ToolSpec, get, preflight
from ablate.models._openai import OpenAIModel
from ablate.models._retry import ProviderError

from .conftest import Reply

MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
TOOLS = [ToolSpec("bash", "Run a shell command.", {"type": "object", "properties": {"command": {"type": "string"}}})]


def completion(content=None, tool_calls=None, finish="stop", usage=None):
    """A chat.completion body as vLLM sends it."""
    msg = {"role": "assistant", "content": content, "reasoning_content": None, "tool_calls": tool_calls or []}
    return {"id": "chatcmpl-9d2f", "object": "chat.completion", "created": 1764490000, "model": MODEL,
            "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish, "stop_reason": None}],
            "usage": usage or {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
                               "prompt_tokens_details": None},
            "prompt_logprobs": None}


def tool_call(args, id_="chatcmpl-tool-1", name="bash"):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


def vllm_error(msg, code=400):
    return {"object": "error", "message": msg, "type": "BadRequestError", "param": None, "code": code}


@pytest.fixture
def cfg(server):
    return {"provider": "openai", "name": "vllm-local", "id": MODEL, "base_url": server.url + "/v1",
            "api_key_env": None, "max_tokens": 2048, "temperature": 0.0, "seed": 1234,
            "price_per_mtok": {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0},
            "max_retries": 3, "retry_base_s": 0.001, "timeout_s": 5}


def user():
    return [Message("user", "List the files.")]


@pytest.mark.parametrize("finish,calls,ours", [
    ("stop", None, "end"), ("tool_calls", [tool_call('{"command": "ls"}')], "tool_use"),
    ("length", None, "max_tokens"), ("content_filter", None, "refusal"),
    ("stop", [tool_call('{"command": "ls"}')], "tool_use")])  # some servers say stop after a call
def test_finish_reasons_are_normalised(server, cfg, finish, calls, ours):
    server.reply(200, completion("hi" if not calls else None, calls, finish))
    assert get(cfg).generate("sys", user(), TOOLS).stop_reason == ours


def test_request_carries_tools_seed_temperature_and_the_empty_key(server, cfg):
    server.reply(200, completion("ok"))
    get(cfg).generate("You write kernels.", user(), TOOLS)
    req = server.posts()[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["authorization"] == "Bearer EMPTY"
    body = req["json"]
    assert body["model"] == MODEL and body["seed"] == 1234 and body["temperature"] == 0.0 and body["max_tokens"] == 2048
    assert body["messages"][0] == {"role": "system", "content": "You write kernels."}
    assert body["tools"] == [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                                               "parameters": TOOLS[0].parameters}}]


def test_seed_and_temperature_are_left_out_when_null(server, cfg):
    server.reply(200, completion("ok"))
    get(cfg | {"seed": None, "temperature": None}).generate("sys", user(), TOOLS)
    assert not {"seed", "temperature"} & server.posts()[0]["json"].keys()


def test_tool_round_trip_keeps_ids_and_the_models_argument_text(server, cfg):
    server.reply(200, completion(None, [tool_call('{"command": "ls"}')], "tool_calls"))
    server.reply(200, completion("done"))
    model = get(cfg)
    first = model.generate("sys", user(), TOOLS)
    assert first.tool_calls == [ToolCall("chatcmpl-tool-1", "bash", {"command": "ls"})]
    history = user() + [first.as_message(), Message("tool", "nvcc: not found", tool_call_id="chatcmpl-tool-1", is_error=True)]
    model.generate("sys", history, TOOLS)
    sent = server.posts()[1]["json"]["messages"]
    assert sent[2]["tool_calls"] == [tool_call('{"command": "ls"}')]
    assert sent[3] == {"role": "tool", "tool_call_id": "chatcmpl-tool-1", "content": "ERROR: nvcc: not found"}


@pytest.mark.parametrize("args,words", [
    ('{"command": "ls"', "not valid JSON"), ('["ls"]', "must be a JSON object"), ("ls -la", "not valid JSON")])
def test_malformed_arguments_become_a_parse_error_not_a_crash(server, cfg, args, words):
    server.reply(200, completion(None, [tool_call(args)], "tool_calls"))
    model = get(cfg)
    r = model.generate("sys", user(), TOOLS)
    (call,) = r.tool_calls
    assert call.arguments == {} and words in call.parse_error and call.name == "bash"
    # the malformed text goes back to the server as the model wrote it
    server.reply(200, completion("ok"))
    model.generate("sys", user() + [r.as_message(), Message("tool", call.parse_error, tool_call_id=call.id, is_error=True)], TOOLS)
    assert server.posts()[1]["json"]["messages"][2]["tool_calls"][0]["function"]["arguments"] == args


def test_empty_arguments_mean_a_call_without_arguments(server, cfg):
    server.reply(200, completion(None, [tool_call("")], "tool_calls"))
    (call,) = get(cfg).generate("sys", user(), TOOLS).tool_calls
    assert call.arguments == {} and call.parse_error is None


def test_usage_and_cost_split_cached_prompt_tokens(server, cfg):
    usage = {"prompt_tokens": 5000, "completion_tokens": 700, "total_tokens": 5700,
             "prompt_tokens_details": {"cached_tokens": 4000}}
    server.reply(200, completion("ok", usage=usage))
    price = {"input": 2.0, "output": 10.0, "cache_read": 0.2, "cache_write": 2.5}
    u = get(cfg | {"price_per_mtok": price}).generate("sys", user(), TOOLS).usage
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (1000, 4000, 700)
    assert u.cost_usd == pytest.approx((1000 * 2.0 + 4000 * 0.2 + 700 * 10.0) / 1e6)


def test_local_server_without_prices_is_free(server, cfg):
    server.reply(200, completion("ok"))
    model = get({k: v for k, v in cfg.items() if k != "price_per_mtok"})
    assert model.generate("sys", user(), TOOLS).usage.cost_usd == 0.0
    assert model.max_cost_of_next_call("sys", user(), TOOLS) == 0.0


def test_429_then_503_then_success_is_retried_and_counted(server, cfg):
    server.reply(429, {"error": {"message": "Rate limit reached", "type": "requests", "param": None, "code": "rate_limit_exceeded"}})
    server.reply(503, vllm_error("Service Unavailable", 503))
    server.reply(200, completion("ok"))
    model = get(cfg)
    assert model.generate("sys", user(), TOOLS).text == "ok"
    assert len(server.posts()) == 3 and model.attempts == 3


def test_timeout_is_retried_then_gives_up_clearly(server, cfg):
    for _ in range(2):
        server.reply(200, completion("late"), delay_s=1.5)
    model = get(cfg | {"timeout_s": 0.3, "max_retries": 1})
    with pytest.raises(ProviderError, match="gave up after 2 attempts; last error: APITimeoutError"):
        model.generate("sys", user(), TOOLS)
    assert model.attempts == 2


def test_context_overflow_ends_with_context_exceeded(server, cfg):
    server.reply(400, vllm_error("This model's maximum context length is 32768 tokens. However, you requested "
                                 "40000 tokens (37952 in the messages, 2048 in the completion)."))
    assert get(cfg).generate("sys", user(), TOOLS).stop_reason == "context_exceeded"


def test_bad_key_is_one_clear_error(server, cfg, monkeypatch):
    monkeypatch.setenv("VLLM_KEY", "wrong")
    server.reply(401, {"error": "Unauthorized"})
    with pytest.raises(ProviderError, match=r"^VLLM_KEY was rejected \(401\)"):
        get(cfg | {"api_key_env": "VLLM_KEY"}).generate("sys", user(), TOOLS)
    assert len(server.posts()) == 1


def test_preflight_needs_a_named_key(cfg, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(AblateError, match="model vllm-local needs OPENAI_API_KEY in the environment"):
        preflight(cfg | {"api_key_env": "OPENAI_API_KEY"})


def test_preflight_without_server_names_the_url(cfg, closed_url):
    with pytest.raises(AblateError, match=rf"^cannot reach the OpenAI-compatible server at {closed_url}/v1"):
        preflight(cfg | {"base_url": closed_url + "/v1"})


def test_preflight_checks_the_model_is_served(server, cfg):
    listing = {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 1764490000, "owned_by": "vllm"}]}
    server.reply(200, listing)
    preflight(cfg)
    assert server.requests[0]["path"] == "/v1/models"
    server.reply(200, dict(listing, data=[dict(listing["data"][0], id="other/model")]))
    with pytest.raises(AblateError, match=r"does not serve 'Qwen/Qwen3-Coder-30B-A3B-Instruct'; it serves: other/model"):
        preflight(cfg)


def test_registry_builds_the_provider(cfg):
    assert isinstance(get(cfg), OpenAIModel) and get(cfg).id == MODEL


def test_response_raw_is_json(server, cfg):
    server.reply(200, completion(None, [tool_call('{"command": "ls"}')], "tool_calls"))
    raw = get(cfg).generate("sys", user(), TOOLS).raw
    assert json.loads(json.dumps(raw))["tool_calls"][0]["id"] == "chatcmpl-tool-1"


# --- streaming, and replies that do not arrive whole -------------------------------------------

def chunks(content=None, calls=None, finish="stop", usage=True):
    """The chunks of a streamed chat completion as vLLM writes them, [DONE] last."""
    head = {"id": "chatcmpl-9d2f", "object": "chat.completion.chunk", "created": 1764490000, "model": MODEL}

    def chunk(delta, finish_reason=None):
        return dict(head, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}])

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": word}) for word in re.findall(r"\S+\s*", content or "")]
    for i, c in enumerate(calls or []):
        out.append(chunk({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                          "function": {"name": c["function"]["name"], "arguments": ""}}]}))
        out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": c["function"]["arguments"]}}]}))
    out.append(chunk({}, finish))
    if usage:
        out.append(dict(head, choices=[], usage={"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}))
    return [f"data: {json.dumps(c)}\n\n" for c in out] + ["data: [DONE]\n\n"]


def test_streamed_reply_text_tool_calls_and_usage(server, cfg):
    server.reply(steps=chunks("Let me look.", [tool_call('{"command": "ls"}')], "tool_calls"))
    r = get(cfg | {"stream": True}).generate("sys", user(), TOOLS)
    body = server.posts()[0]["json"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert r.text == "Let me look."
    assert r.tool_calls == [ToolCall("chatcmpl-tool-1", "bash", {"command": "ls"})] and r.stop_reason == "tool_use"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.estimated_tokens) == (120, 30, 0)
    assert r.raw["tool_calls"] == [tool_call('{"command": "ls"}')]


def test_malformed_streamed_arguments_become_a_parse_error(server, cfg):
    server.reply(steps=chunks(None, [tool_call('{"command": "ls"')], "tool_calls"))
    (call,) = get(cfg | {"stream": True}).generate("sys", user(), TOOLS).tool_calls
    assert call.arguments == {} and "not valid JSON" in call.parse_error


def test_keep_alive_comments_alone_are_a_stall_and_are_retried(server, cfg):
    server.reply(steps=chunks("hello")[:1] + [0.1, ": ping\n\n"] * 100)  # 10 s of comments
    server.reply(steps=chunks("hello"))
    model = get(cfg | {"stream": True, "timeout_s": 1.0})
    t = time.monotonic()
    r = model.generate("sys", user(), TOOLS)
    assert time.monotonic() - t < 5 and r.text == "hello" and model.attempts == 2
    assert r.failed_attempts[0].error.startswith("StreamStalled")


@pytest.mark.parametrize("keep,missing", [(2, "finish_reason and [DONE]"), (-1, "[DONE]")])
def test_a_stream_cut_short_is_retried_not_taken_as_an_end(server, cfg, keep, missing):
    server.reply(steps=chunks("hello there")[:keep])
    server.reply(steps=chunks("hello there"))
    model = get(cfg | {"stream": True})
    r = model.generate("sys", user(), TOOLS)
    assert r.text == "hello there" and model.attempts == 2
    (dropped,) = r.failed_attempts
    assert dropped.error.startswith("StreamDropped") and dropped.error.endswith(f"without {missing}")
    assert dropped.usage.total_tokens > 0  # the prompt was read and paid, counted by estimate if not reported


@pytest.mark.parametrize("stream", [False, True])
def test_a_server_without_usage_is_counted_by_estimate_and_priced(server, cfg, stream):
    from ablate.models import TOKEN_ESTIMATE
    if stream:
        server.reply(steps=chunks("four words of reply", usage=False))
    else:
        server.reply(200, {k: v for k, v in completion("four words of reply").items() if k != "usage"})
    price = {"input": 2.0, "output": 10.0, "cache_read": 0.2, "cache_write": 2.5}
    u = get(cfg | {"stream": stream, "price_per_mtok": price}).generate("sys", user(), TOOLS).usage
    sent = server.posts()[0]["json"]
    assert u.input_tokens == -(-len((json.dumps(sent["messages"]) + json.dumps(sent["tools"])).encode()) // 3)
    assert u.output_tokens == -(-len("four words of reply") // 3)
    assert u.estimated_tokens == u.total_tokens and u.to_dict()["estimated_by"] == TOKEN_ESTIMATE
    assert u.cost_usd == pytest.approx((u.input_tokens * 2.0 + u.output_tokens * 10.0) / 1e6)


@pytest.mark.parametrize("stream", [False, True])
def test_an_html_page_is_retried_then_an_outage(server, cfg, stream):
    server.routes[("POST", "/v1/chat/completions")] = Reply(200, text="<html><body>Bad gateway</body></html>")
    model = get(cfg | {"stream": stream, "max_retries": 1})
    with pytest.raises(ProviderOutage, match="gave up after 2 attempts; last error: NotAReply") as e:
        model.generate("sys", user(), TOOLS)
    assert isinstance(e.value, AblateError) and len(e.value.failed_attempts) == 2


def test_no_choices_is_the_servers_fault_not_the_users(server, cfg):
    server.reply(200, dict(completion("x"), choices=[]))
    server.reply(200, completion("ok"))
    model = get(cfg)
    assert model.generate("sys", user(), TOOLS).text == "ok" and model.attempts == 2


def test_an_error_object_inside_a_stream_is_retried(server, cfg):
    error_chunk = 'data: {"error": {"message": "EngineCore encountered an issue", "type": "InternalServerError", "code": 500}}\n\n'
    server.reply(steps=chunks("hello")[:2] + [error_chunk])
    server.reply(steps=chunks("hello"))
    model = get(cfg | {"stream": True})
    r = model.generate("sys", user(), TOOLS)
    assert r.text == "hello" and model.attempts == 2 and "EngineCore" in r.failed_attempts[0].error
