"""Replay behind the gateway: an external agent's recorded trial served back, call by call, at no
cost and with no network (``+model=replay model.source=runs/<study>/<trial>``).

Each request is checked against the recorded one before the recorded reply goes back: the same
wire format, the same conversation shape (roles, and the tool calls by id and name: the ids are
the recording's own, which the agent echoes back) and, with ``check: full``, the same text from
the user and the tools once every number is masked (timings, addresses, token counts differ from
run to run). System prompts are not compared: an agent's carries its session ids and dates. The
first difference ends the trial with one line naming it, as ablate.models' replay does.
"""
from __future__ import annotations

import re
import threading
from typing import Any

from ablate.errors import AblateError
from ablate.gateway import _wire
from ablate.gateway._server import Outcome, error_body
from ablate.models import Usage
from ablate.models._replay import _snip

NUMBER = re.compile(r"\d+")
TMP = re.compile(r"/tmp/\S*")


def _shape(fmt: str, body: dict[str, Any], check: str) -> list[tuple]:
    _, messages, _ = _wire.request_view(fmt, body)
    out = []
    for m in messages:
        text = TMP.sub("<tmp>", NUMBER.sub("#", m.content)) if check == "full" and m.role in ("user", "tool") else ""
        out.append((m.role, tuple((c.id, c.name) for c in m.tool_calls), m.tool_call_id, text))
    return out


def first_difference(fmt: str, recorded: dict[str, Any], now: dict[str, Any], check: str) -> str | None:
    a, b = _shape(fmt, recorded, check), _shape(fmt, now, check)
    for i, (x, y) in enumerate(zip(a, b), start=1):
        for label, u, v in (("role", x[0], y[0]), ("tool calls", x[1], y[1]), ("tool result id", x[2], y[2]),
                            ("text (numbers masked)", x[3], y[3])):
            if u != v:
                a_, b_ = _snip(u if isinstance(u, str) else str(u), v if isinstance(v, str) else str(v))
                return f"message {i} {label} differs: recorded {a_} vs now {b_}"
    if len(a) != len(b):
        return f"the agent sent {len(b)} messages, the recording has {len(a)}"
    return None


class ReplayAgent:
    def __init__(self, calls: list[dict[str, Any]], source: Any, check: str = "full", recorded_id: str = "replay"):
        wires = {(c.get("response") or {}).get("wire") for c in calls}
        if None in wires or not wires <= set(_wire.FORMATS):
            raise AblateError(f"replay source {source} was not recorded through the model gateway (an external "
                              f"agent's trial); replay it with the harness that made it")
        self.calls, self.source, self.check = calls, source, check
        self.formats = tuple(sorted(wires))
        self.model = recorded_id if recorded_id.startswith("replay:") else f"replay:{recorded_id}"
        self.n = 0
        self.diverged: str | None = None
        self._lock = threading.Lock()

    def prepare(self, fmt: str, body: dict[str, Any]) -> tuple[dict[str, Any], int, dict[str, Any]]:
        return body, 0, {}

    def respond(self, fmt: str, body: dict[str, Any], stream: bool, out: Any, headers: Any = None) -> Outcome:
        with self._lock:
            n = self.n
            if self.diverged is None and n >= len(self.calls):
                self.diverged = f"the agent asked for call {n + 1} but the recording has {len(self.calls)}"
            if self.diverged is None:
                rec = self.calls[n]
                if rec["response"]["wire"] != fmt:
                    self.diverged = f"call {n + 1} is {fmt}, recorded as {rec['response']['wire']}"
                else:
                    diff = first_difference(fmt, rec["request"].get("body") or {}, body, self.check)
                    if diff:
                        self.diverged = f"call {n + 1}: {diff}"
            if self.diverged is not None:
                reply = error_body(fmt, 400, f"ablate replay of {self.source} diverged: {self.diverged}")
                out.json(400, reply)
                return Outcome(400, reply, None, "rejected")
            self.n += 1
        recorded = rec["response"]
        if recorded.get("status") != 200 or recorded.get("stop_reason") == "error":  # a recorded failure, served as it was
            out.json(int(recorded.get("status") or 500), recorded.get("body") or {})
            return Outcome(int(recorded.get("status") or 500), recorded.get("body") or {}, None, recorded.get("failure"))
        _wire.send(out, fmt, recorded["body"], stream)
        u = recorded["usage"]
        usage = Usage(*(int(u.get(k) or 0) for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                                                    "cache_write_tokens")), calls=1)
        return Outcome(200, recorded["body"], usage)
