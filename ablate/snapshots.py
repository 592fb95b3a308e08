"""Snapshots of the submission along a trial, so every arm has trusted points before its end.

After each tool call of every arm (the agent loop's ``after_tool``), the workspace's kernel.py is
hashed; when its content changed since the last snapshot it is copied into the trial directory
with what had been spent by then. Nothing is judged during the trial (an arm without an evaluate
tool must not get one through this); ``python -m ablate.rescore <study> --snapshots`` judges them
later with the trusted evaluator, and analysis draws them as best-so-far points.

    <trial>/snapshots/turn-0007.py                          a copy of kernel.py after turn 7
    <trial>/snapshots/evaluations/turn-0007--<version>--<device>--<shape set>.json   its judgement
    record.json: "snapshots": {"file", "limit", "max_bytes", "taken": [{turn, tokens, cost_usd,
                 sha256, bytes, file, tool}], "not_kept": {reason: count}}

The copy is read through the workspace's safe reader after a no-follow check: a kernel.py that is
a symlink, a FIFO or a device, or over ``MAX_BYTES``, is never copied, only counted (each change
of kind once) in ``not_kept``, as are changes past ``LIMIT``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

SUBMISSION = "kernel.py"
LIMIT = 64  # snapshots per trial; the final kernel is judged anyway
MAX_BYTES = 1 << 20  # the evaluator rejects a larger kernel.py (file_too_large): nothing to learn from it
FOLDER = "snapshots"
JUDGED = "evaluations"


class Snapshots:
    """Takes the snapshots of one trial into ``folder`` (inside the trial directory, outside the
    workspace, so the agent can neither see nor edit them)."""

    def __init__(self, ws, folder: Path, file: str = SUBMISSION, limit: int = LIMIT, max_bytes: int = MAX_BYTES):
        self.ws, self.folder, self.file, self.limit, self.max_bytes = ws, Path(folder), file, limit, max_bytes
        self.taken: list[dict[str, Any]] = []
        self.not_kept: dict[str, int] = {}
        self._last: str | None = None  # the sha256 of the last snapshot, or the reason the last look kept none

    def after_tool(self, state, tool: str = "") -> None:
        """Called by the loop after each tool call: snapshot kernel.py if it changed."""
        r = state.result
        self.take(r.turns, r.usage.total_tokens, r.usage.cost_usd, tool)

    def take(self, turn: int, tokens: int, cost_usd: float, tool: str = "") -> dict[str, Any] | None:
        data, why = self._read()
        seen = hashlib.sha256(data).hexdigest() if data is not None else why
        if seen == self._last or why == "absent":
            return None  # unchanged (or not written yet): one hash, nothing else
        self._last = seen
        if data is None:
            self.not_kept[why] = self.not_kept.get(why, 0) + 1
            return None
        if len(self.taken) >= self.limit:
            self.not_kept["over_limit"] = self.not_kept.get("over_limit", 0) + 1
            return None
        name = f"turn-{int(turn):04d}.py"
        n = 2
        while any(s["file"] == name for s in self.taken):
            name, n = f"turn-{int(turn):04d}-{n}.py", n + 1
        from ablate.store import write_atomic

        self.folder.mkdir(exist_ok=True)
        write_atomic(self.folder / name, data)
        entry = {"turn": int(turn), "tokens": int(tokens), "cost_usd": round(float(cost_usd), 6), "sha256": seen,
                 "bytes": len(data), "file": name, "tool": tool}
        self.taken.append(entry)
        return entry

    def _read(self) -> tuple[bytes | None, str]:
        """kernel.py's bytes, or None and why none: absent, symlink, not_regular, too_large."""
        try:
            st = os.lstat(self.ws.path / self.file)
        except FileNotFoundError:
            return None, "absent"
        except OSError:
            return None, "unreadable"
        if stat.S_ISLNK(st.st_mode):
            return None, "symlink"  # never followed, even to a file inside the workspace
        if not stat.S_ISREG(st.st_mode):
            return None, "not_regular"
        if st.st_size > self.max_bytes:
            return None, "too_large"
        try:  # a link swapped in after the lstat is refused by the reader too (no path out)
            return self.ws.read_bytes(self.file, max_bytes=self.max_bytes), ""
        except PermissionError as e:
            return None, "too_large" if "limit" in str(e) else "not_regular"
        except OSError:
            return None, "unreadable"

    def describe(self) -> dict[str, Any]:
        """The record's ``snapshots`` section."""
        return {"file": self.file, "limit": self.limit, "max_bytes": self.max_bytes, "taken": list(self.taken),
                "not_kept": dict(self.not_kept)}


def taken(record_snapshots: Any) -> list[dict[str, Any]]:
    """The well-formed snapshot entries of a record's ``snapshots`` section (none for older records)."""
    items = record_snapshots.get("taken") if isinstance(record_snapshots, dict) else None
    return [s for s in items or [] if isinstance(s, dict) and isinstance(s.get("file"), str)
            and "/" not in s["file"] and isinstance(s.get("sha256"), str)]


def slug(text: Any) -> str:
    """A file-name-safe form of a version, device or shape-set name."""
    return re.sub(r"[^0-9A-Za-z._-]+", "_", str(text)).strip("_") or "none"


def judgement_name(snapshot: dict[str, Any], version: str | None, device: str, shape_set: str) -> str:
    """The file a judgement of one snapshot is stored under: one per evaluator version, device and shape set."""
    return f"{Path(snapshot['file']).stem}--{slug(version or 'unversioned')}--{slug(device)}--{slug(shape_set)}.json"


def judgements(trial_dir: Path | str) -> dict[str, list[dict[str, Any]]]:
    """Stored judgements of a trial's snapshots, by snapshot file name (unreadable ones skipped)."""
    out: dict[str, list[dict[str, Any]]] = {}
    folder = Path(trial_dir) / FOLDER / JUDGED
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            entry = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        snap = entry.get("snapshot") if isinstance(entry, dict) else None
        if isinstance(snap, dict) and isinstance(snap.get("file"), str) and isinstance(entry.get("evaluation"), dict):
            out.setdefault(snap["file"], []).append(entry)
    return out
