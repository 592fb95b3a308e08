"""The trial's budget as the gateway holds it: every model call an external agent makes is admitted
here first (refused once a limit would be crossed) and counted here after.

The same limits as ablate's own loop (harnesses.Budget): turns (model calls), tokens, cost_usd,
wall_s, and tool_s / gpu_s. An external agent runs its tools itself, out of the gateway's sight, so
its tool time is the wall time it spent outside model calls (its commands and its own processing),
and its GPU time is that same time when the sandbox shows it a GPU (ablate's shell counts a
command's wall seconds the same way). Calls in flight reserve their estimate, so agents that call
the model in parallel cannot overrun a limit together.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Any

from ablate.models import Usage

CHARS_PER_TOKEN = 3  # as ablate.models._pricing: fewer than real text has, so estimates err high
MAX_EVENTS = 50  # refusals and malformed requests kept for the record


class Meter:
    def __init__(self, budget: Any, price: dict[str, float], gpu: bool = False, clock=time.monotonic):
        self.budget, self.price, self.gpu, self.clock = budget, dict(price), gpu, clock
        self.started = clock()
        self.usage = Usage()
        self.turns = 0
        self.tool_calls = 0
        self.stopped: str | None = None  # the limit that ended the agent
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._in_flight = 0
        self._reserved_tokens = 0
        self._reserved_cost = 0.0
        self._busy = 0.0  # seconds with at least one model call in flight
        self._busy_since: float | None = None
        self._last_output = 0

    # -- what has been spent ---------------------------------------------------------------------
    def wall_s(self) -> float:
        return self.clock() - self.started

    def model_s(self) -> float:
        with self._lock:
            return self._busy + (self.clock() - self._busy_since if self._busy_since is not None else 0.0)

    def tool_s(self) -> float:
        return max(0.0, self.wall_s() - self.model_s())

    def gpu_s(self) -> float:
        return self.tool_s() if self.gpu else 0.0

    def over(self) -> str | None:
        """A time limit already crossed (wall, tool, GPU seconds): checked between calls too."""
        b = self.budget
        for name, spent in (("wall_s", self.wall_s), ("tool_s", self.tool_s), ("gpu_s", self.gpu_s)):
            limit = getattr(b, name, None)
            if limit is not None and spent() >= limit:
                return name
        return None

    def estimate(self, request_chars: int, max_tokens: int) -> tuple[int, float]:
        """(tokens, dollars) a call may use at most: its prompt at about a token per three
        characters, read at the dearer of input and cache-write prices, plus its reply (as long as
        the last reply for the tokens; max_tokens for the dollars, the bound a bill can reach)."""
        n_in = math.ceil(request_chars / CHARS_PER_TOKEN)
        cost = (n_in * max(self.price["input"], self.price["cache_write"]) + max_tokens * self.price["output"]) / 1e6
        return n_in + self._last_output, cost

    # -- one call --------------------------------------------------------------------------------
    def admit(self, tokens: int, cost: float) -> str | None:
        """Reserve a call, or name the limit it would cross (and remember it: the agent is ended)."""
        b = self.budget
        limit = self.stopped or self.over()
        with self._lock:
            if limit is None:
                if b.turns is not None and self.turns + self._in_flight >= b.turns:
                    limit = "turns"
                elif b.tokens is not None and self.usage.total_tokens + self._reserved_tokens + tokens > b.tokens:
                    limit = "tokens"
                elif b.cost_usd is not None and self.usage.cost_usd + self._reserved_cost + cost > b.cost_usd:
                    limit = "cost_usd"
            if limit is None:
                self._in_flight += 1
                self._reserved_tokens += tokens
                self._reserved_cost += cost
                if self._busy_since is None:
                    self._busy_since = self.clock()
                return None
        self.stop(limit)
        return self.stopped

    def settle(self, tokens: int, cost: float, usage: Usage | None, tool_calls: int = 0) -> None:
        """The call reserved with (tokens, cost) is over; ``usage``: what it used (None: it failed
        before the model answered, and counts as no turn)."""
        with self._lock:
            self._in_flight -= 1
            self._reserved_tokens -= tokens
            self._reserved_cost -= cost
            if self._in_flight == 0 and self._busy_since is not None:
                self._busy += self.clock() - self._busy_since
                self._busy_since = None
            if usage is not None:
                self.turns += 1
                self.tool_calls += tool_calls
                self.usage = self.usage + usage
                self._last_output = usage.output_tokens

    def cost(self, usage: Usage) -> float:
        p = self.price
        return (usage.input_tokens * p["input"] + usage.output_tokens * p["output"]
                + usage.cache_read_tokens * p["cache_read"] + usage.cache_write_tokens * p["cache_write"]) / 1e6

    def stop(self, limit: str) -> None:
        with self._lock:
            if self.stopped is None:
                self.stopped = limit
                self._event({"event": "budget", "limit": limit})

    def note(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._event(event)

    def _event(self, event: dict[str, Any]) -> None:
        if len(self.events) < MAX_EVENTS:
            self.events.append({**event, "wall_s": round(self.wall_s(), 3)})
