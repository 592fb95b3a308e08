"""Replays a recorded trial's model calls, offline and free, and stops where the harness diverges.

    model = ReplayModel("runs/<study>/<trial>")      # or .../model_calls.jsonl
    model.id                                         # "replay:<the recorded model id>"

Each generate() checks that the harness asks what it asked when the recording was made
(system prompt, tools, messages, after masking volatile text such as timings and temporary
paths) and returns the recorded response. ``check="structure"`` also ignores tool-result
text, for replaying on a machine whose tools print different output.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.models._protocol import Message, Response, ToolCall, ToolSpec, Usage
from ablate.models._recorder import request_dict

CALLS_FILE = "model_calls.jsonl"
CHECKS = ("full", "structure")
MESSAGE_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "is_error")
# Text that differs between two runs of the same trajectory: wall times, addresses, temp paths.
VOLATILE = [
    (re.compile(r"\d+(?:\.\d+)?(?:e-?\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds)\b"), "<time>"),
    (re.compile(r"0x[0-9a-fA-F]{6,}"), "<addr>"),
    (re.compile(r"(?:/tmp|/var/folders|/private/var/folders)/[^\s'\"]*"), "<tmp>"),
]


def _mask(text: str) -> str:
    for pattern, repl in VOLATILE:
        text = pattern.sub(repl, text)
    return text


def normalise(request: Mapping[str, Any], check: str = "full") -> dict[str, Any]:
    """A request as JSON would store it, without provider blocks (``raw`` comes from the
    recorded responses themselves) and with volatile text masked."""
    req = json.loads(json.dumps(request, default=str))
    req["system"] = _mask(req.get("system", ""))
    for m in req.get("messages", []):
        m.pop("raw", None)
        if check == "structure" and m.get("role") == "tool":
            m["content"] = "<tool output>"
        else:
            m["content"] = _mask(m.get("content", ""))
    return req


def _snip(a: Any, b: Any) -> tuple[str, str]:
    """The two values around where they first differ, short enough for one line."""
    sa = a if isinstance(a, str) else json.dumps(a, sort_keys=True)
    sb = b if isinstance(b, str) else json.dumps(b, sort_keys=True)
    k = next((i for i, (x, y) in enumerate(zip(sa, sb)) if x != y), min(len(sa), len(sb)))
    start = max(0, k - 20)

    def cut(s: str) -> str:
        piece = s[start:k + 40]
        return ("..." if start else "") + piece + ("..." if k + 40 < len(s) else "")

    return repr(cut(sa)), repr(cut(sb))


def first_difference(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """One line naming the first thing that differs between two normalised requests."""
    if recorded["system"] != now["system"]:
        a, b = _snip(recorded["system"], now["system"])
        return f"system prompt differs: recorded {a} vs now {b}"
    rt, nt = recorded["tools"], now["tools"]
    if [t["name"] for t in rt] != [t["name"] for t in nt]:
        return f"tools differ: recorded {[t['name'] for t in rt]} vs now {[t['name'] for t in nt]}"
    for t_rec, t_now in zip(rt, nt):
        if t_rec != t_now:
            return f"tool {t_rec['name']!r} differs: recorded {_snip(t_rec, t_now)[0]} vs now {_snip(t_rec, t_now)[1]}"
    rm, nm = recorded["messages"], now["messages"]
    for i, (m_rec, m_now) in enumerate(zip(rm, nm), start=1):
        for f in MESSAGE_FIELDS:
            if m_rec.get(f) != m_now.get(f):
                a, b = _snip(m_rec.get(f), m_now.get(f))
                return f"message {i} ({m_rec.get('role')}) {f} differs: recorded {a} vs now {b}"
    if len(rm) != len(nm):
        return f"the harness sent {len(nm)} messages, the recording has {len(rm)}"
    return None


def response_from_dict(d: Mapping[str, Any]) -> Response:
    """A recorded response, at zero cost (the replay calls nothing); token counts are kept so
    token budgets stop the replay where they stopped the recording."""
    fields = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    recorded = d.get("usage") or {}
    usage = Usage(**{f: int(recorded.get(f, 0)) for f in fields}, cost_usd=0.0, calls=1)
    calls = [ToolCall(**c) for c in d.get("tool_calls", [])]
    return Response(d.get("text", ""), calls, usage, d["stop_reason"], d.get("raw"))


def _recorded_id(trial_dir: Path) -> str:
    try:
        record = json.loads((trial_dir / "record.json").read_text())
    except (OSError, ValueError):
        return "replay"
    model = record.get("model") if isinstance(record, dict) else None
    recorded = str(model["id"]) if isinstance(model, dict) and model.get("id") else "replay"
    return recorded.removeprefix("replay:")  # a replay of a replay names the original model


def load_calls(path: Path) -> list[dict[str, Any]]:
    calls = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            call = json.loads(line)
            if call.get("response") is None and "error" in call:
                continue  # a call that brought no reply (an outage, a reply cut at the wall budget): nothing to replay
            call["request"]["messages"], call["response"]["stop_reason"]  # noqa: B018 - shape check
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise AblateError(f"{path}:{lineno} is not a recorded model call ({type(e).__name__}: {e})") from e
        calls.append(call)
    return calls


class ReplayModel:
    def __init__(self, source: str | Path, check: str = "full"):
        path = Path(source)
        calls_file = path / CALLS_FILE if path.is_dir() else path
        if not calls_file.is_file():
            raise AblateError(f"replay source {path} has no {CALLS_FILE}; "
                              f"set model.source=runs/<study>/<trial> (a trial directory or its {CALLS_FILE})")
        if check not in CHECKS:
            raise AblateError(f"replay check must be one of {', '.join(CHECKS)}, got {check!r}")
        self.source = calls_file
        self.check = check
        self.calls = load_calls(calls_file)
        if not self.calls:
            raise AblateError(f"replay source {calls_file} holds no model calls")
        self.id = f"replay:{_recorded_id(calls_file.parent)}"
        self.n = 0  # calls served so far

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "ReplayModel":
        source = cfg.get("source")
        if not source or source == "???":
            raise AblateError("the replay model needs model.source=runs/<study>/<trial> "
                              f"(a trial directory or its {CALLS_FILE})")
        return cls(source, cfg.get("check") or "full")

    @classmethod
    def preflight(cls, cfg: Mapping[str, Any]) -> None:
        cls.from_config(cfg)  # the source exists, parses, and holds calls

    def generate(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> Response:
        if self.n >= len(self.calls):
            raise AblateError(f"replay of {self.source}: the harness asked for call {self.n + 1} "
                              f"but the recording has {len(self.calls)}")
        recorded = self.calls[self.n]
        diff = first_difference(normalise(recorded["request"], self.check),
                                normalise(request_dict(system, messages, tools), self.check))
        if diff:
            raise AblateError(f"replay diverged at call {self.n + 1}: {diff}")
        self.n += 1
        return response_from_dict(recorded["response"])

    def max_cost_of_next_call(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> float:
        return 0.0
