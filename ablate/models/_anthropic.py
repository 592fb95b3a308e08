"""Anthropic Messages API: tools, thinking, prompt caching, retries, usage and cost.

Config keys (``conf/model/*.yaml``): id, name, max_tokens, temperature (null: not sent; current
models reject it), thinking ("adaptive" | "disabled" | null: the model's default),
thinking_budget (> 0: manual extended thinking with that budget, for models that still take
it), effort (output_config.effort, null: the model's default), stream (true: receive the reply
as server-sent events, which long replies need: a quiet connection may be cut before a
many-minute reply arrives), price_per_mtok, base_url, api_key_env, max_retries, retry_base_s,
timeout_s (the longest wait for a byte, and for content in a stream: pings do not count).

A streamed reply is read event by event here, not by the SDK's accumulating helper: a reply is
whole only when message_stop arrived (a stream that ends before it was dropped: retried), and a
tool call whose streamed arguments are not a JSON object goes back to the model as an error
rather than failing the call.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from ablate.models import _pricing
from ablate.models._protocol import Message, Response, ToolCall, ToolSpec, Usage, estimate_tokens
from ablate.models._retry import (Attempt, NotAReply, RetryPolicy, SDKModel, StreamDropped, is_retryable,
                                  status_of)
from ablate.models._watch import HOOKS, watching

log = logging.getLogger("ablate.models")

STOP_REASONS = {
    "end_turn": "end",
    "stop_sequence": "end",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "pause_turn": "pause",
    "refusal": "refusal",
    "model_context_window_exceeded": "context_exceeded",
}
CACHE = {"type": "ephemeral"}
# Error types worth a retry when they arrive inside a stream (HTTP status 200 there).
RETRY_TYPES = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
PREFLIGHT_TIMEOUT_S = 10.0


def _error_fields(e: BaseException) -> tuple[str | None, str]:
    """(error type, message) from an Anthropic error body {"type": "error", "error": {...}}."""
    body = getattr(e, "body", None)
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return err.get("type"), str(err.get("message", ""))
    return None, str(getattr(e, "message", e))


def describe(e: BaseException) -> str:
    status = status_of(e)
    if status is None:
        return f"{type(e).__name__}: {e}"
    etype, msg = _error_fields(e)
    return f"{status} {etype or 'error'}: {msg}"


def _prompt_too_long(e: BaseException) -> bool:
    msg = _error_fields(e)[1].lower()
    return status_of(e) == 400 and ("prompt is too long" in msg or "context window" in msg)


def _thinking(cfg: Mapping[str, Any], max_tokens: int, label: str) -> dict[str, Any] | None:
    mode = cfg.get("thinking")
    budget = int(cfg.get("thinking_budget") or 0)
    if mode not in (None, "adaptive", "disabled"):
        raise AblateError(f"model {label}: thinking must be adaptive, disabled or null, got {mode!r}")
    if mode is not None and budget > 0:
        raise AblateError(f"model {label}: set thinking={mode} or thinking_budget={budget}, not both")
    if mode is not None:
        return {"type": mode}
    if budget > 0:
        if not 1024 <= budget < max_tokens:
            raise AblateError(f"model {label}: thinking_budget must be >= 1024 and below max_tokens "
                              f"({max_tokens}), got {budget}")
        return {"type": "enabled", "budget_tokens": budget}
    return None


def _assistant_blocks(m: Message) -> list[dict[str, Any]]:
    # The provider's own blocks go back verbatim (thinking blocks carry signatures the API checks).
    if isinstance(m.raw, list) and all(isinstance(b, dict) and "type" in b for b in m.raw):
        return list(m.raw)
    blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in m.tool_calls]
    return blocks


def to_api_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Protocol messages -> Messages API turns. Consecutive tool results (and user text after
    them) become one user turn, tool_result blocks first, as the API requires."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant":
            blocks = _assistant_blocks(m)
            if blocks:  # the API refuses an empty assistant turn; an empty reply adds nothing
                out.append({"role": "assistant", "content": blocks})
            continue
        if m.role == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id, "is_error": m.is_error}
            if m.content:
                block["content"] = m.content
        elif m.role == "user":
            if not m.content:
                continue  # the API refuses empty text blocks
            block = {"type": "text", "text": m.content}
        else:
            raise AblateError(f"unknown message role {m.role!r}; valid roles: user, assistant, tool")
        if not out or out[-1]["role"] != "user":
            out.append({"role": "user", "content": []})
        content = out[-1]["content"]
        if block["type"] == "tool_result":
            n_results = sum(1 for b in content if b["type"] == "tool_result")
            content.insert(n_results, block)
        else:
            content.append(block)
    return out


class AnthropicModel(SDKModel):
    """One configured Claude model. ``attempts`` counts HTTP attempts, retries included."""

    def __init__(self, cfg: Mapping[str, Any]):
        import anthropic

        self._sdk = anthropic
        if not cfg.get("id"):
            raise AblateError("model config needs an id, e.g. model.id=claude-fable-5-1")
        self.id: str = str(cfg["id"])
        self.name = str(cfg.get("name") or self.id)
        self.key_env = str(cfg.get("api_key_env") or "ANTHROPIC_API_KEY")
        key = os.environ.get(self.key_env)
        if not key:
            raise AblateError(f"model {self.name} needs {self.key_env} in the environment "
                              f"(or use +model=scripted to run offline)")
        self.max_tokens = int(cfg.get("max_tokens") or 16000)
        self.price = _pricing.prices(cfg, self.name, required=True)
        self.thinking = _thinking(cfg, self.max_tokens, self.name)
        self.effort = cfg.get("effort")
        self.temperature = cfg.get("temperature")
        if cfg.get("seed") is not None:
            raise AblateError(f"model {self.name}: the Anthropic API takes no seed; set model.seed=null")
        self.retry = RetryPolicy.from_config(cfg)
        self.stream = bool(cfg.get("stream", False))
        self.timeout_s = float(cfg.get("timeout_s") or 600)
        # An explicit timeout also lifts the SDK's refusal of long non-streaming requests.
        self.client = anthropic.Anthropic(api_key=key, base_url=cfg.get("base_url") or None,
                                          max_retries=0, timeout=self.timeout_s,
                                          http_client=anthropic.DefaultHttpxClient(event_hooks=HOOKS))
        self.base_url = str(self.client.base_url)
        self.attempts = 0

    @classmethod
    def preflight(cls, cfg: Mapping[str, Any]) -> None:
        """Key present, API reachable, key accepted, model id known, max_tokens within its limit."""
        model = cls(cfg)
        sdk = model._sdk
        try:
            info = model.client.models.retrieve(model.id, timeout=min(PREFLIGHT_TIMEOUT_S, model.timeout_s))
        except sdk.APIConnectionError as e:
            raise AblateError(f"cannot reach the Anthropic API at {model.base_url}: {e.__cause__ or e}") from e
        except sdk.APIStatusError as e:
            raise AblateError(model._explain(e)) from e
        limit = getattr(info, "max_tokens", None)
        if limit and model.max_tokens > limit:
            raise AblateError(f"model {model.name}: max_tokens={model.max_tokens} exceeds {model.id}'s "
                              f"limit of {limit}; set model.max_tokens={limit}")
        if getattr(info, "lifecycle", None) == "retired":
            raise AblateError(f"model {model.id} is retired; pick a current model (see conf/model/)")

    def _explain(self, e: BaseException) -> str:
        status = status_of(e)
        if status == 401:
            return f"{self.key_env} was rejected (401): check the key"
        if status == 403:
            return f"{self.key_env} may not use {self.id} (403): {_error_fields(e)[1]}"
        if status == 404:
            return (f"model id {self.id!r} is unknown to the Anthropic API at {self.base_url} (404); "
                    f"set model.id to a current id")
        return f"Anthropic API refused the request for {self.name} ({describe(e)})"

    def params(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The Messages API request body, with cache breakpoints on the last tool, the system
        prompt and the newest user turn (so each call reads the previous call's prefix)."""
        p: dict[str, Any] = {"model": self.id, "max_tokens": self.max_tokens, "messages": to_api_messages(messages)}
        if system:
            p["system"] = [{"type": "text", "text": system, "cache_control": CACHE}]
        if tools:
            p["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]
            p["tools"][-1]["cache_control"] = CACHE
        last = p["messages"][-1] if p["messages"] else None
        if last is not None and last["role"] == "user" and last["content"]:
            last["content"][-1] = {**last["content"][-1], "cache_control": CACHE}
        if self.thinking:
            p["thinking"] = self.thinking
        if self.effort:
            p["output_config"] = {"effort": self.effort}
        if self.temperature is not None:
            p["extra_body"] = {"temperature": float(self.temperature)}  # the SDK no longer names it
        return p

    def _attempt(self, params: dict[str, Any], attempt: Attempt) -> Response:
        with watching(self.timeout_s):
            if not self.stream:
                try:
                    msg = self.client.messages.create(**params)
                except json.JSONDecodeError as e:
                    raise NotAReply(f"the reply's body is not JSON ({e})") from e
                if not isinstance(msg, self._sdk.types.Message):
                    raise NotAReply(f"the reply is not a Messages API message: {str(msg)[:120]!r}")
                return self._response(msg.to_dict(mode="json", warnings=False))
            stream = self.client.messages.create(**params, stream=True)
            with stream:
                ctype = stream.response.headers.get("content-type", "")
                if not ctype.startswith("text/event-stream"):
                    raise NotAReply(f"status {stream.response.status_code} with {ctype or 'no content type'}, not an "
                                    f"event stream: {stream.response.read()[:120]!r}")
                reply = _Reply()
                attempt.paid = lambda: self._cost(reply.usage())
                try:
                    for event in stream:
                        reply.add(event.to_dict(mode="json", warnings=False))
                except json.JSONDecodeError as e:
                    raise NotAReply(f"the stream carried an event that is not JSON ({e})") from e
            if not reply.stopped:
                raise StreamDropped(f"the stream ended after {reply.events} events without message_stop")
            return self._response(reply.message())

    def _retryable(self, e: BaseException) -> bool:
        try:  # the SDK's HTTP client; a stream cut mid-reply raises its errors unwrapped
            from httpx2 import TransportError
        except ImportError:
            from httpx import TransportError
        return is_retryable(e, (self._sdk.APIConnectionError, TransportError)) or \
            _error_fields(e)[0] in RETRY_TYPES

    def generate(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> Response:
        params = self.params(system, messages, tools)
        return self._send(lambda attempt: self._attempt(params, attempt), self._retryable, describe,
                          f"anthropic {self.id}", _prompt_too_long)

    def _response(self, msg: dict[str, Any]) -> Response:
        """A Response from a Messages API message as JSON (its blocks kept as the API sent them)."""
        content, u = msg.get("content"), msg.get("usage")
        if msg.get("type") != "message" or not isinstance(content, list) or not isinstance(u, dict) \
                or not all(isinstance(b, dict) for b in content):
            raise NotAReply(f"the reply is not a Messages API message: {json.dumps(msg)[:120]}")
        if msg.get("stop_reason") is None:
            raise NotAReply("the reply has no stop_reason")
        text = "\n".join(b.get("text") or "" for b in content if b.get("type") == "text")
        calls = []
        for b in content:
            if b.get("type") != "tool_use":
                continue
            if b.get("parse_error"):
                calls.append(ToolCall(b["id"], b["name"], {}, parse_error=b.pop("parse_error")))
            elif isinstance(b.get("input"), dict):
                calls.append(ToolCall(b["id"], b["name"], dict(b["input"])))
            else:
                error = f"arguments must be a JSON object, got {b.get('input')!r}"
                calls.append(ToolCall(b["id"], b["name"], {}, parse_error=error))
                b["input"] = {}  # the API takes the call back only with an object
        usage = self._cost(Usage(input_tokens=u.get("input_tokens") or 0, output_tokens=u.get("output_tokens") or 0,
                                 cache_read_tokens=u.get("cache_read_input_tokens") or 0,
                                 cache_write_tokens=u.get("cache_creation_input_tokens") or 0, calls=1))
        stop = STOP_REASONS.get(msg["stop_reason"])
        if stop is None:
            log.warning("anthropic %s: unknown stop_reason %r, treated as end", self.id, msg["stop_reason"])
            stop = "end"
        return Response(text, calls, usage, stop, content)


class _Reply:
    """A streamed Messages API reply put together from its events (as JSON), the way the API
    documents them; a tool call's arguments are parsed once its block ends."""

    def __init__(self) -> None:
        self.msg: dict[str, Any] | None = None
        self.stopped = False
        self.events = 0
        self._json: dict[int, str] = {}
        self._reported_output = False

    def add(self, ev: dict[str, Any]) -> None:
        self.events += 1
        kind = ev.get("type")
        if kind == "message_start":
            self.msg = dict(ev["message"], content=[])
            return
        if self.msg is None:
            raise NotAReply(f"the stream sent {kind} before message_start")
        blocks = self.msg["content"]
        if kind == "content_block_start":
            blocks.append(dict(ev["content_block"]))
        elif kind in ("content_block_delta", "content_block_stop"):
            i = ev.get("index")
            if not isinstance(i, int) or not 0 <= i < len(blocks):
                raise NotAReply(f"the stream sent {kind} for block {i!r}, which never started")
            if kind == "content_block_delta":
                self._delta(i, blocks[i], ev.get("delta") or {})
            elif i in self._json:
                self._arguments(blocks[i], self._json.pop(i))
        elif kind == "message_delta":
            self.msg.update(ev.get("delta") or {})
            usage = ev.get("usage") or {}
            self.msg["usage"] = {**self.msg.get("usage", {}), **{k: v for k, v in usage.items() if v is not None}}
            self._reported_output = "output_tokens" in usage
        elif kind == "message_stop":
            self.stopped = True

    def _delta(self, i: int, block: dict[str, Any], d: dict[str, Any]) -> None:
        kind = d.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + d.get("text", "")
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + d.get("thinking", "")
        elif kind == "signature_delta":
            block["signature"] = d.get("signature", "")
        elif kind == "input_json_delta":
            self._json[i] = self._json.get(i, "") + d.get("partial_json", "")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(d.get("citation"))

    @staticmethod
    def _arguments(block: dict[str, Any], text: str) -> None:
        if not text.strip():
            return  # a call without arguments keeps the {} it started with
        try:
            block["input"] = json.loads(text)
        except json.JSONDecodeError as e:
            block["input"] = {}  # the API takes the call back only with an object
            block["parse_error"] = f"arguments are not valid JSON ({e}): {text[:200]}"

    def message(self) -> dict[str, Any]:
        for i, text in list(self._json.items()):  # a block the stream never closed
            self._arguments(self.msg["content"][i], text)
        return self.msg

    def usage(self) -> Usage:
        """What the reply has used so far: the usage the API reported (input at message_start,
        output at message_delta), the output counted by TOKEN_ESTIMATE until it reports it."""
        if self.msg is None:
            return Usage()
        u = self.msg.get("usage") or {}
        usage = Usage(input_tokens=u.get("input_tokens") or 0, output_tokens=u.get("output_tokens") or 0,
                      cache_read_tokens=u.get("cache_read_input_tokens") or 0,
                      cache_write_tokens=u.get("cache_creation_input_tokens") or 0)
        if not self._reported_output:
            streamed = "".join(b.get("text", "") + b.get("thinking", "") for b in self.msg["content"])
            streamed += "".join(self._json.values())
            usage.output_tokens = max(usage.output_tokens, estimate_tokens(streamed))
            usage.estimated_tokens = usage.output_tokens
        return usage
