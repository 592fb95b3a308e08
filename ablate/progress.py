"""What a running study shows: trials done, running and failed, tokens and cost so far, time left.

On a terminal a live view (rich) redraws in place, with a line per running trial; otherwise (a
log file, a SLURM job) each event is one plain line carrying the same counts. Thread-safe: the
runner's parallel slots report from their own threads.
"""
from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field


@dataclass
class _Running:
    label: str
    started: float = field(default_factory=time.monotonic)
    turns: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class StudyView:
    def __init__(self, total: int, already: int, slots: int, log=print, live: bool | None = None):
        self.total, self.already, self.slots, self.log = total, already, max(1, slots), log
        self.live = sys.stderr.isatty() if live is None else live
        self.done = self.failed = self.retries = 0
        self.tokens, self.cost_usd = 0, 0.0
        self.durations: list[float] = []
        self.running: dict[str, _Running] = {}
        self.gave_up: dict[str, dict] = {}  # trial id -> the last failure, for trials that failed every attempt
        self.started = time.monotonic()
        self._lock = threading.RLock()
        self._live = None

    # --- events -------------------------------------------------------------------------------
    def start(self, key: str, label: str) -> None:
        with self._lock:
            self.running[key] = _Running(label)
            self._line(f"{label} ...")

    def turn(self, key: str, turns: int, tokens: int, cost_usd: float) -> None:
        with self._lock:
            r = self.running.get(key)
            if r:
                r.turns, r.tokens, r.cost_usd = turns, tokens, cost_usd

    def finish(self, key: str, line: str, tokens: int, cost_usd: float) -> None:
        with self._lock:
            r = self.running.pop(key, None)
            self.done += 1
            self.tokens += tokens
            self.cost_usd += cost_usd
            if r:
                self.durations.append(time.monotonic() - r.started)
            self._line(f"{line}  [{self.summary()}]")

    def attempt_failed(self, key: str, line: str, retrying: bool) -> None:
        """An attempt ended without a record; what it used until its last turn counts in the totals."""
        with self._lock:
            r = self.running.pop(key, None)
            if r:
                self.tokens += r.tokens
                self.cost_usd += r.cost_usd
            if retrying:
                self.retries += 1
            else:
                self.failed += 1
            self._line(f"{line}  [{self.summary()}]")

    def note(self, line: str) -> None:
        with self._lock:
            self._line(line)

    # --- rendering ----------------------------------------------------------------------------
    def remaining(self) -> int:
        return max(0, self.total - self.already - self.done - self.failed)

    def time_left(self) -> str:
        if not self.durations:
            return "?"
        waves = -(-self.remaining() // self.slots)  # ceil: trials run `slots` at a time
        return _duration(waves * sum(self.durations) / len(self.durations))

    def summary(self) -> str:
        tokens = sum(r.tokens for r in self.running.values()) + self.tokens
        cost = sum(r.cost_usd for r in self.running.values()) + self.cost_usd
        parts = [f"{self.already + self.done}/{self.total} done", f"{len(self.running)} running", f"{self.failed} failed"]
        if self.retries:
            parts.append(f"{self.retries} retried")
        return (", ".join(parts) + f"; {tokens:,} tokens, ${cost:.2f}; elapsed {_duration(time.monotonic() - self.started)}"
                + f", ~{self.time_left()} left")

    def _line(self, text: str) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            self.log(text)

    def _render(self):
        from rich.table import Table

        with self._lock:
            table = Table(title=self.summary(), title_justify="left", expand=False, box=None, pad_edge=False)
            for col in ("running", "turn", "tokens", "cost", "for"):
                table.add_column(col, justify="left" if col == "running" else "right")
            for r in self.running.values():
                table.add_row(r.label, str(r.turns), f"{r.tokens:,}", f"${r.cost_usd:.2f}",
                              _duration(time.monotonic() - r.started))
            return table

    def __enter__(self) -> "StudyView":
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(file=sys.stderr), get_renderable=self._render,
                              refresh_per_second=2, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            live, self._live = self._live, None
            live.__exit__(*exc)
            live.console.print(self.summary(), markup=False, highlight=False)
