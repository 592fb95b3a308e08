"""Anthropic Messages API: tools, thinking, prompt caching, retries, usage and cost.

Config keys (``conf/model/*.yaml``): id, name, max_tokens, temperature (null: not sent; current
models reject it), thinking ("adaptive" | "disabled" | null: the model's default),
thinking_budget (> 0: manual extended thinking with that budget, for models that still take
it), effort (output_config.effort, null: the model's default), stream (true: receive the reply
as server-sent events, which long replies need: a quiet connection may be cut before a
many-minute reply arrives), price_per_mtok, base_url, api_key_env, max_retries, retry_base_s,
timeout_s.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from ablate.models import _pricing
from ablate.models._protocol import Message, Response, ToolCall, ToolSpec, Usage
from ablate.models._retry import RetryPolicy, SDKModel, is_retryable, status_of

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
                                          max_retries=0, timeout=self.timeout_s)
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

    def _call(self, params: dict[str, Any]) -> Any:
        if self.stream:
            with self.client.messages.stream(**params) as events:
                return events.get_final_message()
        return self.client.messages.create(**params)

    def _retryable(self, e: BaseException) -> bool:
        try:  # the SDK's HTTP client; a stream cut mid-reply raises its errors unwrapped
            from httpx2 import TransportError
        except ImportError:
            from httpx import TransportError
        return is_retryable(e, (self._sdk.APIConnectionError, TransportError)) or \
            _error_fields(e)[0] in RETRY_TYPES

    def generate(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> Response:
        params = self.params(system, messages, tools)
        msg = self._send(lambda: self._call(params), self._retryable, describe, f"anthropic {self.id}",
                         _prompt_too_long)
        return msg if isinstance(msg, Response) else self._response(msg)

    def _response(self, msg: Any) -> Response:
        raw = [b.to_dict(mode="json", warnings=False) for b in msg.content]  # only the fields the API sent
        text = "\n".join(b.text for b in msg.content if b.type == "text")
        calls = []
        for b in msg.content:
            if b.type != "tool_use":
                continue
            if isinstance(b.input, dict):
                calls.append(ToolCall(b.id, b.name, dict(b.input)))
            else:
                error = f"arguments must be a JSON object, got {b.input!r}"
                calls.append(ToolCall(b.id, b.name, {}, parse_error=error))
        u = msg.usage
        usage = Usage(input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                      cache_read_tokens=u.cache_read_input_tokens or 0,
                      cache_write_tokens=u.cache_creation_input_tokens or 0, calls=1)
        usage.cost_usd = _pricing.cost_usd(self.price, usage)
        stop = STOP_REASONS.get(msg.stop_reason or "")
        if stop is None:
            log.warning("anthropic %s: unknown stop_reason %r, treated as end", self.id, msg.stop_reason)
            stop = "end"
        return Response(text, calls, usage, stop, raw)
