"""The three wire formats the gateway speaks: Anthropic Messages, OpenAI Chat Completions and
OpenAI Responses. For each: a reply composed here (scripted, replay) as the API's JSON body or its
stream of server-sent events; a streamed reply folded back into that body (to record it and count
its tokens); the body's token usage; and a provider-neutral view of a request and a reply (the
record's ``messages`` and the trial's transcript).

    FORMATS["anthropic"].path == "/v1/messages"
    body = render(fmt, reply, model_id)               # the API's non-streaming JSON
    events = render_events(fmt, reply, model_id)      # [(event name | None, data dict | "[DONE]")]
    acc = Accumulator(fmt); acc.add(data) ...; acc.body()   # a stream folded into the body
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from ablate.models import Message, ToolCall, Usage


@dataclass(frozen=True)
class Format:
    name: str
    path: str  # the POST path an agent sends it to
    label: str


FORMATS = {f.name: f for f in (Format("anthropic", "/v1/messages", "Anthropic Messages"),
                               Format("chat", "/v1/chat/completions", "OpenAI Chat Completions"),
                               Format("responses", "/v1/responses", "OpenAI Responses"))}
STOPS = {  # the API's stop reason -> the neutral one (ablate.models.STOP_REASONS)
    "anthropic": {"end_turn": "end", "stop_sequence": "end", "tool_use": "tool_use", "max_tokens": "max_tokens",
                  "pause_turn": "pause", "refusal": "refusal", "model_context_window_exceeded": "context_exceeded"},
    "chat": {"stop": "end", "tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens",
             "content_filter": "refusal"},
}


@dataclass
class Call:
    """One tool call in a reply. ``custom``: a Responses freeform tool (apply_patch), whose input is text."""

    id: str
    name: str
    input: dict[str, Any] | str
    custom: bool = False


@dataclass
class Reply:
    """A reply the gateway composes itself, in no format yet."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    @property
    def stop(self) -> str:
        return "tool_use" if self.calls else "end"


def _id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


# -- replies composed here ---------------------------------------------------------------------
def render(fmt: str, r: Reply, model: str) -> dict[str, Any]:
    """The reply as the API's non-streaming JSON body."""
    u = r.usage
    if fmt == "anthropic":
        content: list[dict[str, Any]] = [{"type": "text", "text": r.text}] if r.text else []
        content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in r.calls]
        return {"id": _id("msg_"), "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": "tool_use" if r.calls else "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                          "cache_creation_input_tokens": u.cache_write_tokens,
                          "cache_read_input_tokens": u.cache_read_tokens}}
    if fmt == "chat":
        msg: dict[str, Any] = {"role": "assistant", "content": r.text or None}
        if r.calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.name, "arguments": c.input if isinstance(c.input, str) else json.dumps(c.input)}}
                for c in r.calls]
        return {"id": _id("chatcmpl-"), "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if r.calls else "stop"}],
                "usage": {"prompt_tokens": u.input_tokens + u.cache_read_tokens, "completion_tokens": u.output_tokens,
                          "total_tokens": u.total_tokens,
                          "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens}}}
    if fmt == "responses":
        return {"id": _id("resp_"), "object": "response", "created_at": 0, "status": "completed", "model": model,
                "output": _response_items(r), "usage": _responses_usage(u), "error": None,
                "incomplete_details": None}
    raise ValueError(f"unknown wire format {fmt!r}")


def _response_items(r: Reply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if r.text:
        items.append({"type": "message", "id": _id("msg_"), "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": r.text, "annotations": []}]})
    for c in r.calls:
        if c.custom:
            items.append({"type": "custom_tool_call", "id": _id("ctc_"), "status": "completed", "call_id": c.id,
                          "name": c.name, "input": c.input if isinstance(c.input, str) else json.dumps(c.input)})
        else:
            items.append({"type": "function_call", "id": _id("fc_"), "status": "completed", "call_id": c.id,
                          "name": c.name, "arguments": c.input if isinstance(c.input, str) else json.dumps(c.input)})
    return items


def _responses_usage(u: Usage) -> dict[str, Any]:
    return {"input_tokens": u.input_tokens + u.cache_read_tokens,
            "input_tokens_details": {"cached_tokens": u.cache_read_tokens},
            "output_tokens": u.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.total_tokens}


def render_events(fmt: str, r: Reply, model: str) -> list[tuple[str | None, Any]]:
    """The reply as the API streams it: (event name or None, data) pairs; data "[DONE]" is sent raw."""
    return events_of(fmt, render(fmt, r, model))


def events_of(fmt: str, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """A whole reply body (composed here or recorded) as the API's stream of events."""
    if fmt == "anthropic":
        start = {**body, "content": [], "stop_reason": None,
                 "usage": {**body.get("usage", {}), "output_tokens": 0}}
        out: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": start})]
        for i, block in enumerate(body.get("content") or []):
            kind = block.get("type")
            if kind == "text":
                first, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block.get("text", "")}
            elif kind == "tool_use":
                first = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}))}
            elif kind == "thinking":
                first, delta = {"type": "thinking", "thinking": ""}, {"type": "thinking_delta",
                                                                      "thinking": block.get("thinking", "")}
            else:
                first, delta = block, None
            out.append(("content_block_start", {"type": "content_block_start", "index": i, "content_block": first}))
            if delta is not None:
                out.append(("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
            if kind == "thinking" and block.get("signature"):
                out.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                    "delta": {"type": "signature_delta", "signature": block["signature"]}}))
            out.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        out.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": body.get("stop_reason"),
                                                                         "stop_sequence": None},
                                      "usage": body.get("usage", {})}))
        return out + [("message_stop", {"type": "message_stop"})]
    if fmt == "chat":
        choice = (body.get("choices") or [{}])[0]
        msg, base = choice.get("message") or {}, {k: body.get(k) for k in ("id", "created", "model")}
        base["object"] = "chat.completion.chunk"
        chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": msg.get("content") or ""},
                                        "finish_reason": None}]}]
        for i, tc in enumerate(msg.get("tool_calls") or []):
            chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{**tc, "index": i}]},
                                                "finish_reason": None}]})
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}]})
        chunks.append({**base, "choices": [], "usage": body.get("usage")})
        return [(None, c) for c in chunks] + [(None, "[DONE]")]
    if fmt == "responses":
        shell = {**body, "status": "in_progress", "output": [], "usage": None}
        out = [("response.created", {"type": "response.created", "response": shell}),
               ("response.in_progress", {"type": "response.in_progress", "response": shell})]
        for i, item in enumerate(body.get("output") or []):
            out.append(("response.output_item.added", {"type": "response.output_item.added", "output_index": i,
                                                       "item": {**item, "status": "in_progress"}}))
            if item.get("type") == "message":
                text = "".join(p.get("text", "") for p in item.get("content") or [])
                out.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": item.get("id"),
                                                           "output_index": i, "content_index": 0, "delta": text}))
                out.append(("response.output_text.done", {"type": "response.output_text.done", "item_id": item.get("id"),
                                                          "output_index": i, "content_index": 0, "text": text}))
            out.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": i,
                                                      "item": item}))
        return out + [("response.completed", {"type": "response.completed", "response": body})]
    raise ValueError(f"unknown wire format {fmt!r}")


def sse(event: str | None, data: Any) -> bytes:
    """One server-sent event."""
    payload = data if isinstance(data, str) else json.dumps(data)
    return ((f"event: {event}\n" if event else "") + f"data: {payload}\n\n").encode()


# -- streams folded into bodies ------------------------------------------------------------------
class Accumulator:
    """Folds a streamed reply, event by event (the parsed ``data`` of each), into the body the API
    would have sent without streaming."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.msg: dict[str, Any] = {}
        self._json: dict[int, str] = {}  # Anthropic tool_use block index -> its partial JSON
        self.error: Any = None

    def add(self, d: Any) -> None:
        if not isinstance(d, dict):
            return
        if self.fmt == "anthropic":
            self._anthropic(d)
        elif self.fmt == "chat":
            self._chat(d)
        elif self.fmt == "responses":
            kind = d.get("type")
            if kind in ("response.created", "response.in_progress") and isinstance(d.get("response"), dict):
                self.msg = dict(d["response"])
            elif kind == "response.output_item.done" and isinstance(d.get("item"), dict):
                self.msg.setdefault("output", []).append(d["item"])
            elif kind in ("response.completed", "response.incomplete", "response.failed") and \
                    isinstance(d.get("response"), dict):
                self.msg = dict(d["response"])
            elif kind == "error":
                self.error = d

    def _anthropic(self, d: dict[str, Any]) -> None:
        kind = d.get("type")
        if kind == "message_start" and isinstance(d.get("message"), dict):
            self.msg = {**d["message"], "content": []}
        elif kind == "content_block_start" and isinstance(d.get("content_block"), dict):
            self.msg.setdefault("content", []).append(dict(d["content_block"]))
        elif kind == "content_block_delta" and isinstance(d.get("delta"), dict):
            blocks, i = self.msg.get("content") or [], d.get("index")
            if not isinstance(i, int) or not 0 <= i < len(blocks):
                return
            delta, block = d["delta"], blocks[i]
            for key, field_ in (("text_delta", "text"), ("thinking_delta", "thinking"), ("signature_delta", "signature"),
                                ("citations_delta", None)):
                if delta.get("type") == key and field_:
                    block[field_] = block.get(field_, "") + str(delta.get(field_, ""))
            if delta.get("type") == "input_json_delta":
                self._json[i] = self._json.get(i, "") + str(delta.get("partial_json", ""))
        elif kind == "content_block_stop":
            i = d.get("index")
            if i in self._json:
                try:
                    self.msg["content"][i]["input"] = json.loads(self._json.pop(i) or "{}")
                except (ValueError, IndexError, KeyError):
                    pass
        elif kind == "message_delta":
            self.msg.update({k: v for k, v in (d.get("delta") or {}).items() if k in ("stop_reason", "stop_sequence")})
            self.msg["usage"] = {**(self.msg.get("usage") or {}), **(d.get("usage") or {})}
        elif kind == "error":
            self.error = d

    def _chat(self, d: dict[str, Any]) -> None:
        if not self.msg:
            self.msg = {k: d.get(k) for k in ("id", "created", "model")} | {
                "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": ""},
                                                          "finish_reason": None}]}
        if isinstance(d.get("usage"), dict):
            self.msg["usage"] = d["usage"]
        if isinstance(d.get("error"), dict):
            self.error = d
        choice = self.msg["choices"][0]
        for c in d.get("choices") or []:
            if not isinstance(c, dict):
                continue
            delta = c.get("delta") or {}
            if delta.get("content"):
                choice["message"]["content"] = (choice["message"].get("content") or "") + str(delta["content"])
            for tc in delta.get("tool_calls") or []:
                if not isinstance(tc, dict):
                    continue
                calls = choice["message"].setdefault("tool_calls", [])
                i = tc.get("index", len(calls))
                while len(calls) <= i:
                    calls.append({"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                fn = tc.get("function") or {}
                calls[i]["id"] = tc.get("id") or calls[i]["id"]
                calls[i]["function"]["name"] += str(fn.get("name") or "")
                calls[i]["function"]["arguments"] += str(fn.get("arguments") or "")
            if c.get("finish_reason"):
                choice["finish_reason"] = c["finish_reason"]

    def body(self) -> dict[str, Any]:
        return self.msg


# -- usage and the neutral view ------------------------------------------------------------------
def usage_of(fmt: str, body: dict[str, Any]) -> Usage:
    """Token counts of a reply body (cost is the meter's). Input counts only uncached tokens."""
    u = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(u, dict):
        return Usage(calls=1)

    def n(d: Any, key: str) -> int:
        v = d.get(key) if isinstance(d, dict) else None
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else 0

    if fmt == "anthropic":
        return Usage(n(u, "input_tokens"), n(u, "output_tokens"), n(u, "cache_read_input_tokens"),
                     n(u, "cache_creation_input_tokens"), calls=1)
    if fmt == "chat":
        cached = n(u.get("prompt_tokens_details"), "cached_tokens")
        return Usage(max(n(u, "prompt_tokens") - cached, 0), n(u, "completion_tokens"), cached, calls=1)
    cached = n(u.get("input_tokens_details"), "cached_tokens")
    return Usage(max(n(u, "input_tokens") - cached, 0), n(u, "output_tokens"), cached, calls=1)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for b in content if isinstance(content, list) else []:
        if isinstance(b, dict) and isinstance(b.get("text"), str):
            parts.append(b["text"])
        elif isinstance(b, dict) and b.get("type") == "tool_result":
            continue
    return "\n".join(parts)


def _args(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"input": value}


def reply_view(fmt: str, body: dict[str, Any]) -> tuple[str, list[ToolCall], str]:
    """(text, tool calls, neutral stop reason) of a reply body."""
    if fmt == "anthropic":
        blocks = [b for b in body.get("content") or [] if isinstance(b, dict)]
        calls = [ToolCall(str(b.get("id")), str(b.get("name")), _args(b.get("input"))) for b in blocks
                 if b.get("type") == "tool_use"]
        return _text(blocks), calls, STOPS["anthropic"].get(str(body.get("stop_reason")), "end")
    if fmt == "chat":
        choice = (body.get("choices") or [{}])[0] if isinstance(body.get("choices"), list) else {}
        msg = choice.get("message") or {}
        calls = [ToolCall(str(tc.get("id")), str((tc.get("function") or {}).get("name")),
                          _args((tc.get("function") or {}).get("arguments"))) for tc in msg.get("tool_calls") or []
                 if isinstance(tc, dict)]
        stop = STOPS["chat"].get(str(choice.get("finish_reason")), "end")
        return str(msg.get("content") or ""), calls, "tool_use" if calls else stop
    items = [i for i in body.get("output") or [] if isinstance(i, dict)]
    text = "\n".join(_text(i.get("content")) for i in items if i.get("type") == "message")
    calls = [ToolCall(str(i.get("call_id")), str(i.get("name")),
                     _args(i.get("arguments") if i.get("type") == "function_call" else i.get("input")))
             for i in items if i.get("type") in ("function_call", "custom_tool_call")]
    stop = "max_tokens" if body.get("status") == "incomplete" else "tool_use" if calls else "end"
    return text, calls, stop


def request_view(fmt: str, body: dict[str, Any]) -> tuple[str, list[Message], list[str]]:
    """(system text, messages, tool names) of a request body, provider-neutral."""
    tools = [str(t.get("name") or t.get("type")) for t in body.get("tools") or [] if isinstance(t, dict)]
    msgs: list[Message] = []
    if fmt == "anthropic":
        system = _text(body.get("system"))
        for m in body.get("messages") or []:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if m.get("role") == "assistant":
                text, calls, _ = reply_view("anthropic", {"content": content if isinstance(content, list) else
                                                           [{"type": "text", "text": _text(content)}]})
                msgs.append(Message("assistant", text, calls))
                continue
            for b in content if isinstance(content, list) else []:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    msgs.append(Message("tool", _text(b.get("content")), tool_call_id=str(b.get("tool_use_id")),
                                        is_error=bool(b.get("is_error"))))
            text = _text(content)
            if text:
                msgs.append(Message("user" if m.get("role") != "system" else "system", text))
        return system, msgs, tools
    if fmt == "chat":
        system = "\n".join(_text(m.get("content")) for m in body.get("messages") or []
                           if isinstance(m, dict) and m.get("role") in ("system", "developer"))
        for m in body.get("messages") or []:
            if not isinstance(m, dict) or m.get("role") in ("system", "developer"):
                continue
            if m.get("role") == "assistant":
                text, calls, _ = reply_view("chat", {"choices": [{"message": m}]})
                msgs.append(Message("assistant", text, calls))
            elif m.get("role") == "tool":
                msgs.append(Message("tool", _text(m.get("content")), tool_call_id=str(m.get("tool_call_id"))))
            else:
                msgs.append(Message("user", _text(m.get("content"))))
        return system, msgs, tools
    system = str(body.get("instructions") or "")
    items = body.get("input")
    for i in [{"type": "message", "role": "user", "content": items}] if isinstance(items, str) else items or []:
        if not isinstance(i, dict):
            continue
        kind = i.get("type", "message")
        if kind == "message":
            role = i.get("role")
            role = "assistant" if role == "assistant" else "system" if role in ("system", "developer") else "user"
            msgs.append(Message(role, _text(i.get("content"))))
        elif kind in ("function_call", "custom_tool_call"):
            call = ToolCall(str(i.get("call_id")), str(i.get("name")),
                            _args(i.get("arguments") if kind == "function_call" else i.get("input")))
            if msgs and msgs[-1].role == "assistant":
                msgs[-1].tool_calls.append(call)
            else:
                msgs.append(Message("assistant", "", [call]))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out = i.get("output")
            msgs.append(Message("tool", out if isinstance(out, str) else _text(out) or json.dumps(out),
                                tool_call_id=str(i.get("call_id"))))
    return system, msgs, tools


def send(out: Any, fmt: str, body: dict[str, Any], stream: bool) -> None:
    """A whole reply body through the server's ``Out``: as JSON, or as the API's event stream."""
    if not stream:
        out.json(200, body)
        return
    out.start(200)
    for event, data in events_of(fmt, body):
        out.write(sse(event, data))
