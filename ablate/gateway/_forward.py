"""The forwarding policy: an agent's request goes on to the trial's configured provider, with the
key read here (outside the sandbox), the model and its settings the trial's own, and every tool
that would run on the provider's side (web search, web fetch, code execution, remote MCP servers)
taken out: the agent has no network, and its model must not lend it one. The reply streams back
to the agent as it arrives, and is folded into one body to record and count.

Config keys (conf/model/*.yaml, as the providers read them): provider (anthropic: Anthropic
Messages; openai: Chat Completions and Responses), id, base_url, api_key_env, max_tokens,
thinking, thinking_budget, effort, temperature, seed, timeout_s. Retries are the agent's own
(Claude Code and Codex retry 429, 529 and 5xx themselves, so those reach them as they came); when
the agent gives up after them, the trial ends as an infrastructure failure, which the runner retries.
A request that names a file stored at the provider (a file_id) is refused: nothing outside the
sandbox reaches the agent but the model's replies.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from ablate.gateway import _wire
from ablate.gateway._server import Outcome, error_body

ANTHROPIC_URL = "https://api.anthropic.com"
OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_MAX_TOKENS = 32000  # the cost bound of a call whose request and config name none
MAX_REPLY = 64 << 20  # bytes of a non-streamed reply read from the provider
# Tools the agent's own process runs (kept); any other type runs on the provider's side (removed).
CLIENT_TOOLS = {"anthropic": ("custom", "bash_", "text_editor_", "computer_", "memory_", "tool_search_tool_"),
                "chat": ("function", "custom"),
                "responses": ("function", "custom", "local_shell", "shell", "apply_patch")}
SERVER_PARAMS = {"anthropic": ("mcp_servers", "container"), "chat": ("web_search_options",),
                 "responses": ("previous_response_id", "conversation", "background", "prompt")}


def _kept(fmt: str, tool: Any) -> bool:
    if not isinstance(tool, dict):
        return False
    kind = tool.get("type")
    if fmt == "anthropic" and kind is None:
        return True
    if fmt == "responses" and kind == "tool_search":
        return tool.get("execution") == "client"  # a search over the request's own tools
    return isinstance(kind, str) and kind.startswith(CLIENT_TOOLS[fmt])


class SSEParser:
    """Splits a byte stream into the parsed JSON ``data`` of each server-sent event."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, chunk: bytes) -> list[Any]:
        self.buf += chunk.replace(b"\r\n", b"\n")
        out = []
        while b"\n\n" in self.buf:
            block, self.buf = self.buf.split(b"\n\n", 1)
            data = b"\n".join(line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:"))
            if data and data != b"[DONE]":
                try:
                    out.append(json.loads(data))
                except ValueError:
                    continue
        return out


class Forward:
    forwards = True  # its calls reach a provider (the record counts them as API requests)

    def __init__(self, cfg: Mapping[str, Any]):
        import httpx

        provider = cfg.get("provider")
        if provider not in ("anthropic", "openai"):
            raise AblateError(f"the gateway forwards to anthropic or openai providers, not {provider!r}")
        self.provider, self.model = provider, str(cfg.get("id") or "")
        if not self.model:
            raise AblateError(f"model {cfg.get('name')}: the gateway needs model.id")
        self.formats = ("anthropic",) if provider == "anthropic" else ("chat", "responses")
        key_env = cfg.get("api_key_env") or ("ANTHROPIC_API_KEY" if provider == "anthropic" else None)
        self._key = os.environ.get(key_env) if key_env else "EMPTY"
        if not self._key:
            raise AblateError(f"model {cfg.get('name') or self.model} needs {key_env} in the environment "
                              f"(or use +model=scripted to run offline)")
        self.base = str(cfg.get("base_url") or (ANTHROPIC_URL if provider == "anthropic" else OPENAI_URL)).rstrip("/")
        self.max_tokens = int(cfg.get("max_tokens") or 0) or None
        self.settings = {k: cfg.get(k) for k in ("thinking", "thinking_budget", "effort", "temperature", "seed")}
        timeout = float(cfg.get("timeout_s") or 600)
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=30.0), follow_redirects=False)
        self._httpx = httpx

    # -- what the agent may not choose -----------------------------------------------------------
    def prepare(self, fmt: str, body: dict[str, Any]) -> tuple[dict[str, Any], int, dict[str, Any]]:
        if '"file_id"' in json.dumps(body):
            raise ValueError("a file_id names a file stored at the provider, which the sandbox does not reach; "
                             "put the file's content in the request")
        sent, changed = dict(body), {}

        def put(key: str, value: Any) -> None:
            if sent.get(key) != value:
                changed[key] = sent.get(key)
                sent[key] = value

        put("model", self.model)
        for key in SERVER_PARAMS[fmt]:
            if key in sent:
                changed[key] = sent.pop(key)
        tools = sent.get("tools")
        if isinstance(tools, list):
            kept = [t for t in tools if _kept(fmt, t)]
            if len(kept) != len(tools):
                changed["tools_removed"] = [t.get("type") or t.get("name") if isinstance(t, dict) else str(t)
                                            for t in tools if not _kept(fmt, t)]
                sent["tools"] = kept
        if fmt == "responses" and sent.get("store"):
            put("store", False)
        key = {"anthropic": "max_tokens", "responses": "max_output_tokens"}.get(
            fmt, "max_completion_tokens" if "max_completion_tokens" in sent else "max_tokens")
        asked = sent.get(key)
        if asked is not None and (not isinstance(asked, int) or isinstance(asked, bool) or asked < 1):
            raise ValueError(f"{key} must be a positive integer")
        if self.max_tokens and (asked is None or asked > self.max_tokens):
            put(key, self.max_tokens)
        s = self.settings
        if fmt == "anthropic":
            if int(s["thinking_budget"] or 0) > 0:
                put("thinking", {"type": "enabled", "budget_tokens": int(s["thinking_budget"])})
            elif s["thinking"] and (sent.get("thinking") or {}).get("type") != s["thinking"]:
                put("thinking", {"type": s["thinking"]})
            if s["effort"]:
                put("output_config", {**(sent.get("output_config") or {}), "effort": s["effort"]})
        elif s["effort"]:
            if fmt == "responses":
                put("reasoning", {**(sent.get("reasoning") or {}), "effort": s["effort"]})
            else:
                put("reasoning_effort", s["effort"])
        if s["temperature"] is not None:
            put("temperature", float(s["temperature"]))
        if s["seed"] is not None and fmt == "chat":
            put("seed", int(s["seed"]))
        if fmt == "chat" and sent.get("stream"):
            put("stream_options", {**(sent.get("stream_options") or {}), "include_usage": True})
        return sent, int(sent.get(key) or self.max_tokens or DEFAULT_MAX_TOKENS), changed

    # -- the call --------------------------------------------------------------------------------
    def _request(self, fmt: str) -> tuple[str, dict[str, str]]:
        if fmt == "anthropic":
            return f"{self.base}/v1/messages", {"x-api-key": self._key, "anthropic-version": "2023-06-01"}
        path = "/chat/completions" if fmt == "chat" else "/responses"
        return f"{self.base}{path}", {"authorization": f"Bearer {self._key}"}

    def respond(self, fmt: str, body: dict[str, Any], stream: bool, out: Any,
                headers: Mapping[str, str] | None = None) -> Outcome:
        url, auth = self._request(fmt)
        headers = headers or {}
        hdrs = {"content-type": "application/json", "accept-encoding": "gzip", **auth}
        for name in ("anthropic-version", "anthropic-beta"):  # the API features the agent asks for
            if fmt == "anthropic" and headers.get(name):
                hdrs[name] = headers[name]
        try:
            with self.client.stream("POST", url, content=json.dumps(body).encode(), headers=hdrs) as r:
                ctype = r.headers.get("content-type", "")
                if r.status_code == 200 and "text/event-stream" in ctype:
                    return self._stream(fmt, r, out)
                raw = b""
                for chunk in r.iter_bytes():
                    raw += chunk
                    if len(raw) > MAX_REPLY:
                        raise self._httpx.ReadError(f"the reply passed {MAX_REPLY} bytes")
        except self._httpx.HTTPError as e:
            reply = error_body(fmt, 502, f"the gateway could not reach the model: {type(e).__name__}: {e}"[:500])
            if not out.started:
                out.json(502, reply)
            return Outcome(502, reply, None, "outage")
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            parsed = error_body(fmt, 502, f"the model's API answered {r.status_code} with no JSON: {raw[:200]!r}")
            out.json(502, parsed)
            return Outcome(502, parsed, None, "outage")
        out.json(r.status_code, parsed)
        if r.status_code == 200:
            return Outcome(200, parsed, _wire.usage_of(fmt, parsed))
        failure = "outage" if r.status_code in (408, 409, 429) or r.status_code >= 500 else "rejected"
        return Outcome(r.status_code, parsed, None, failure)

    def _stream(self, fmt: str, r: Any, out: Any) -> Outcome:
        out.start(200, "text/event-stream")
        acc, parser = _wire.Accumulator(fmt), SSEParser()
        try:
            for chunk in r.iter_bytes():
                out.write(chunk)
                for data in parser.feed(chunk):
                    acc.add(data)
        except self._httpx.HTTPError as e:
            return Outcome(200, {**acc.body(), "error": f"stream cut: {type(e).__name__}"}, None, "outage")
        if acc.error is not None or not acc.body():
            return Outcome(200, {**acc.body(), "error": acc.error}, None, "outage")
        return Outcome(200, acc.body(), _wire.usage_of(fmt, acc.body()))

    def close(self) -> None:
        self.client.close()
