"""OpenAI-compatible chat completions (vLLM, SGLang, OpenAI): tools, usage, cost, retries.

Config keys: id, name, base_url, api_key_env (null: the key "EMPTY", what local servers
accept), max_tokens, temperature, seed (passed where set), stream (true: the reply as server-sent
events, with its usage in the last chunk), price_per_mtok (optional: a local server is free),
max_retries, retry_base_s, timeout_s (the longest wait for a byte, and for content in a stream:
keep-alive comments do not count).

A streamed reply is whole only with a finish_reason and the closing ``data: [DONE]``; one that
ends before them was dropped (retried). A server that reports no usage has its tokens counted by
ablate.models.TOKEN_ESTIMATE (the record says so), so token and cost budgets still hold.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from ablate.models import _pricing
from ablate.models._protocol import TOKEN_ESTIMATE, Message, Response, ToolCall, ToolSpec, Usage, estimate_tokens
from ablate.models._retry import (Attempt, NotAReply, RetryPolicy, SDKModel, StreamDropped, is_retryable,
                                  status_of)
from ablate.models._watch import HOOKS, watching

log = logging.getLogger("ablate.models")

FINISH_REASONS = {
    "stop": "end",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}
PREFLIGHT_TIMEOUT_S = 10.0
CONTEXT_PHRASES = ("maximum context length", "context length", "context window", "too many tokens")


def _error_message(e: BaseException) -> str:
    # OpenAI nests {"error": {"message"}}; vLLM answers {"object": "error", "message"}.
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error") if isinstance(body.get("error"), dict) else body
        if err.get("message"):
            return str(err["message"])
    return str(getattr(e, "message", e))


def describe(e: BaseException) -> str:
    status = status_of(e)
    return f"{type(e).__name__}: {e}" if status is None else f"{status}: {_error_message(e)}"


def parse_arguments(call_id: str, name: str, text: str | None) -> ToolCall:
    """A tool call from its JSON-string arguments; malformed JSON becomes a parse_error the
    loop sends back to the model, never an exception."""
    if text is None or not text.strip():
        return ToolCall(call_id, name, {})  # a call without arguments
    try:
        args = json.loads(text)
    except json.JSONDecodeError as e:
        return ToolCall(call_id, name, {}, parse_error=f"arguments are not valid JSON ({e}): {text[:200]}")
    if not isinstance(args, dict):
        return ToolCall(call_id, name, {}, parse_error=f"arguments must be a JSON object, got {text[:200]}")
    return ToolCall(call_id, name, args)


def _assistant(m: Message) -> dict[str, Any]:
    raw = m.raw if isinstance(m.raw, dict) else {}
    out: dict[str, Any] = {"role": "assistant", "content": m.content}
    if raw.get("tool_calls"):
        out["tool_calls"] = raw["tool_calls"]  # the model's own argument strings, malformed or not
    elif m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                             for c in m.tool_calls]
    if "tool_calls" in out and not m.content:
        out["content"] = None  # what the API itself returns for a reply that is only tool calls
    return out


def to_api_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.role == "user":
            out.append({"role": "user", "content": m.content})
        elif m.role == "assistant":
            out.append(_assistant(m))
        elif m.role == "tool":
            # Chat completions have no error flag on tool results; the text carries it.
            content = f"ERROR: {m.content}" if m.is_error else m.content
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": content})
        else:
            raise AblateError(f"unknown message role {m.role!r}; valid roles: user, assistant, tool")
    return out


def _context_exceeded(e: BaseException) -> bool:
    return status_of(e) == 400 and any(p in _error_message(e).lower() for p in CONTEXT_PHRASES)


class OpenAIModel(SDKModel):
    """A model behind an OpenAI-compatible server. ``attempts`` counts HTTP attempts."""

    def __init__(self, cfg: Mapping[str, Any]):
        import openai

        self._sdk = openai
        if not cfg.get("id"):
            raise AblateError("model config needs an id, e.g. model.id=Qwen/Qwen3-Coder-30B-A3B-Instruct")
        self.id: str = str(cfg["id"])
        self.name = str(cfg.get("name") or self.id)
        self.key_env = cfg.get("api_key_env")
        key = os.environ.get(self.key_env) if self.key_env else "EMPTY"
        if not key:
            raise AblateError(f"model {self.name} needs {self.key_env} in the environment "
                              f"(or set model.api_key_env=null for a local server without a key)")
        self.max_tokens = int(cfg.get("max_tokens") or 8192)
        self.temperature = cfg.get("temperature")
        self.seed = cfg.get("seed")
        self.price = _pricing.prices(cfg, self.name, required=False)
        self.retry = RetryPolicy.from_config(cfg)
        self.timeout_s = float(cfg.get("timeout_s") or 600)
        self.stream = bool(cfg.get("stream", False))
        self._warned_no_usage = False
        self.client = openai.OpenAI(api_key=key, base_url=cfg.get("base_url") or None,
                                    max_retries=0, timeout=self.timeout_s,
                                    http_client=openai.DefaultHttpxClient(event_hooks=HOOKS))
        self.base_url = str(self.client.base_url)
        self.attempts = 0

    @classmethod
    def preflight(cls, cfg: Mapping[str, Any]) -> None:
        """Key present (when one is named), server reachable, key accepted, model served."""
        model = cls(cfg)
        sdk = model._sdk
        try:
            served = [m.id for m in model.client.models.list(timeout=min(PREFLIGHT_TIMEOUT_S, model.timeout_s))]
        except sdk.APIConnectionError as e:
            raise AblateError(f"cannot reach the OpenAI-compatible server at {model.base_url}: {e.__cause__ or e} "
                              f"(start it, e.g. `vllm serve {model.id}`, or set model.base_url)") from e
        except sdk.APIStatusError as e:
            raise AblateError(model._explain(e)) from e
        if served and model.id not in served:
            raise AblateError(f"the server at {model.base_url} does not serve {model.id!r}; "
                              f"it serves: {', '.join(served[:10])}")

    def _explain(self, e: BaseException) -> str:
        status = status_of(e)
        if status == 401:
            return f"{self.key_env or 'the API key'} was rejected (401) by {self.base_url}: check the key"
        if status == 404:
            return f"model {self.id!r} or its endpoint is unknown to {self.base_url} (404): {_error_message(e)}"
        return f"the server at {self.base_url} refused the request for {self.name} ({describe(e)})"

    def params(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        p: dict[str, Any] = {"model": self.id, "messages": to_api_messages(system, messages),
                             "max_tokens": self.max_tokens}
        if tools:
            p["tools"] = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                            "parameters": t.parameters}} for t in tools]
        if self.temperature is not None:
            p["temperature"] = float(self.temperature)
        if self.seed is not None:
            p["seed"] = int(self.seed)
        return p

    def generate(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> Response:
        params = self.params(system, messages, tools)
        return self._send(lambda attempt: self._attempt(params, attempt), self._retryable, describe,
                          f"openai {self.id}", _context_exceeded)

    def _retryable(self, e: BaseException) -> bool:
        # A bare APIError is an error object inside a 200 stream (vLLM's on an engine failure)
        return is_retryable(e, (self._sdk.APIConnectionError,)) or type(e) is self._sdk.APIError

    def _attempt(self, params: dict[str, Any], attempt: Attempt) -> Response:
        with watching(self.timeout_s) as watch:
            if not self.stream:
                try:
                    completion = self.client.chat.completions.create(**params)
                except json.JSONDecodeError as e:
                    raise NotAReply(f"the reply's body is not JSON ({e})") from e
                if not isinstance(completion, self._sdk.types.chat.ChatCompletion):
                    raise NotAReply(f"the reply is not a chat completion: {str(completion)[:120]!r}")
                return self._response(completion.to_dict(mode="json"), params)
            stream = self.client.chat.completions.create(**params, stream=True, stream_options={"include_usage": True})
            with stream:
                ctype = stream.response.headers.get("content-type", "")
                if not ctype.startswith("text/event-stream"):
                    raise NotAReply(f"status {stream.response.status_code} with {ctype or 'no content type'}, not an "
                                    f"event stream: {stream.response.read()[:120]!r}")
                reply = _Reply()
                attempt.paid = lambda: self._cost(self._estimated(params, reply.message(), reply.usage,
                                                                  started=reply.chunks > 0))
                try:
                    for chunk in stream:
                        reply.add(chunk.to_dict(mode="json"))
                except json.JSONDecodeError as e:
                    raise NotAReply(f"the stream carried an event that is not JSON ({e})") from e
            if reply.finish_reason is None or not watch.done:
                missing = " and ".join(m for m, gone in (("finish_reason", reply.finish_reason is None),
                                                         ("[DONE]", not watch.done)) if gone)
                raise StreamDropped(f"the stream ended after {reply.chunks} chunks without {missing}")
            return self._response(reply.completion(), params)

    def _response(self, completion: dict[str, Any], params: dict[str, Any]) -> Response:
        """A Response from a chat completion as JSON."""
        choices = completion.get("choices")
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise NotAReply(f"the reply is not a chat completion: {json.dumps(completion)[:120]}")
        if not choices:
            raise NotAReply(f"the server at {self.base_url} answered {self.id} with no choices")
        choice = choices[0]
        m = choice.get("message") or {}
        calls = [parse_arguments(c.get("id") or "", c["function"].get("name") or "", c["function"].get("arguments"))
                 for c in (m.get("tool_calls") or []) if isinstance(c.get("function"), dict)]
        stop = FINISH_REASONS.get(choice.get("finish_reason") or "")
        if stop is None:
            log.warning("openai %s: unknown finish_reason %r, treated as end", self.id, choice.get("finish_reason"))
            stop = "end"
        if calls and stop == "end":
            stop = "tool_use"  # some servers say "stop" after a tool call
        if m.get("refusal"):
            stop = "refusal"
        if not completion.get("usage") and not self._warned_no_usage:
            log.warning("openai %s: the server reported no usage; its tokens are counted as %s", self.id, TOKEN_ESTIMATE)
            self._warned_no_usage = True
        usage = self._cost(self._estimated(params, m, completion.get("usage")))
        usage.calls = 1
        return Response(m.get("content") or "", calls, usage, stop, m)

    def _estimated(self, params: dict[str, Any], m: dict[str, Any], reported: dict[str, Any] | None,
                   started: bool = True) -> Usage:
        """The usage the server reported; where it reported none, counted by TOKEN_ESTIMATE from
        the request (messages and tools, as sent) and the reply (``started``: any of it arrived)."""
        if reported:
            details = reported.get("prompt_tokens_details") or {}
            cached = details.get("cached_tokens") or 0
            written = details.get("cache_write_tokens") or 0
            # prompt_tokens includes the cached ones; Usage.input_tokens counts only the uncached
            return Usage(input_tokens=max((reported.get("prompt_tokens") or 0) - cached - written, 0),
                         output_tokens=reported.get("completion_tokens") or 0, cache_read_tokens=cached,
                         cache_write_tokens=written)
        if not started:
            return Usage()
        n_in = estimate_tokens(json.dumps(params["messages"]) + json.dumps(params.get("tools") or []))
        out = (m.get("content") or "") + (m.get("reasoning_content") or "") + "".join(
            (c.get("function") or {}).get("name", "") + ((c.get("function") or {}).get("arguments") or "")
            for c in m.get("tool_calls") or [])
        n_out = estimate_tokens(out)
        return Usage(input_tokens=n_in, output_tokens=n_out, estimated_tokens=n_in + n_out)


class _Reply:
    """A streamed chat completion put together from its chunks (as JSON)."""

    def __init__(self) -> None:
        self.chunks = 0
        self.content = ""
        self.reasoning = ""
        self.refusal = ""
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.head: dict[str, Any] = {}

    def add(self, chunk: dict[str, Any]) -> None:
        self.chunks += 1
        self.head = self.head or {k: chunk.get(k) for k in ("id", "model", "created")}
        if chunk.get("usage"):
            self.usage = chunk["usage"]  # the last chunk's (or, with continuous stats, the latest)
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            d = choice.get("delta") or {}
            self.content += d.get("content") or ""
            self.reasoning += d.get("reasoning_content") or d.get("reasoning") or ""
            self.refusal += d.get("refusal") or ""
            for c in d.get("tool_calls") or []:
                call = self.calls.setdefault(c.get("index", len(self.calls)),
                                             {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                call["id"] = c.get("id") or call["id"]
                fn = c.get("function") or {}
                call["function"]["name"] += fn.get("name") or ""
                call["function"]["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def message(self) -> dict[str, Any]:
        m: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.reasoning:
            m["reasoning_content"] = self.reasoning
        if self.refusal:
            m["refusal"] = self.refusal
        if self.calls:
            m["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        return m

    def completion(self) -> dict[str, Any]:
        return {**self.head, "object": "chat.completion", "usage": self.usage,
                "choices": [{"index": 0, "message": self.message(), "finish_reason": self.finish_reason}]}
