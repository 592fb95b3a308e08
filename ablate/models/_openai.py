"""OpenAI-compatible chat completions (vLLM, SGLang, OpenAI): tools, usage, cost, retries.

Config keys: id, name, base_url, api_key_env (null: the key "EMPTY", what local servers
accept), max_tokens, temperature, seed (passed where set), price_per_mtok (optional: a local
server is free), max_retries, retry_base_s, timeout_s.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from ablate.models import _pricing
from ablate.models._protocol import Message, Response, ToolCall, ToolSpec, Usage
from ablate.models._retry import ProviderError, RetryPolicy, SDKModel, is_retryable, status_of

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
        self.client = openai.OpenAI(api_key=key, base_url=cfg.get("base_url") or None,
                                    max_retries=0, timeout=self.timeout_s)
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
        completion = self._send(lambda: self.client.chat.completions.create(**params),
                                lambda e: is_retryable(e, (self._sdk.APIConnectionError,)), describe,
                                f"openai {self.id}", _context_exceeded)
        return completion if isinstance(completion, Response) else self._response(completion)

    def _response(self, completion: Any) -> Response:
        if not completion.choices:
            raise ProviderError(f"the server at {self.base_url} answered {self.id} with no choices")
        choice = completion.choices[0]
        m = choice.message
        calls = [parse_arguments(c.id, c.function.name, c.function.arguments)
                 for c in (m.tool_calls or []) if getattr(c, "function", None) is not None]
        stop = FINISH_REASONS.get(choice.finish_reason or "")
        if stop is None:
            log.warning("openai %s: unknown finish_reason %r, treated as end", self.id, choice.finish_reason)
            stop = "end"
        if calls and stop == "end":
            stop = "tool_use"  # some servers say "stop" after a tool call
        if getattr(m, "refusal", None):
            stop = "refusal"
        usage = Usage(calls=1)
        if completion.usage is None:
            log.warning("openai %s: the server reported no usage; token budgets cannot count this call", self.id)
        else:
            u = completion.usage
            details = u.prompt_tokens_details
            cached = (details.cached_tokens or 0) if details is not None else 0
            written = (details.cache_write_tokens or 0) if details is not None else 0
            # prompt_tokens includes the cached ones; Usage.input_tokens counts only the uncached
            usage = Usage(input_tokens=max(u.prompt_tokens - cached - written, 0),
                          output_tokens=u.completion_tokens, cache_read_tokens=cached,
                          cache_write_tokens=written, calls=1)
            usage.cost_usd = _pricing.cost_usd(self.price, usage)
        raw = m.to_dict(mode="json")
        return Response(m.content or "", calls, usage, stop, raw)
