"""The record store: one directory per trial, written atomically, read back as typed records.

    runs/<study>/<trial_id>/record.json          the TrialRecord (ablate.record), written last
                          /transcript.jsonl      the conversation, one message per line
                          /model_calls.jsonl     every request/response (replayable)
                          /kernel.py             the submission (if any)
                          /evaluation.json       the evaluator's JSON
                          /evaluations/*.json    later rescorings, beside the original (ablate.rescore)
                          /trial.log             what happened, with times (retries included)
                          /workspace/            the agent's final workspace
    runs/<study>/.tmp-XXXXXXXX/                  a trial being run: owner.json, and the transcript and
                                                 model calls streamed to disk as they happen
    runs/<study>/.incomplete/<trial_id>/<n>/     an attempt that did not finish: what it paid for, and
                                                 incomplete.json (why: ablate.record.failure_of)
    runs/<study>/index.parquet                   one row per trial, rebuilt from the directories

A trial directory appears only complete (built under a temporary name, then renamed), so a crash
leaves no half-written record and a rerun redoes exactly the missing trials. A temporary
directory whose owner process is gone (same host: its pid and start time; another host: no
heartbeat for STALE_AFTER_S) is moved to .incomplete by the next run, so what was paid is kept.

This module writes the store; reading it (the Parquet index, read_records, problems) is
ablate._store_index, whose names are importable from here:

    read_records("runs/default", evaluation="latest")   # typed records; corrupt ones reported, skipped
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ablate._store_index import EVALUATIONS, INDEX, index, problems, read_records
from ablate.record import SCHEMA_VERSION, TrialRecord

INCOMPLETE = ".incomplete"
TMP_PREFIX = ".tmp-"
HEARTBEAT_S = 30.0  # a running trial touches its owner.json this often
STALE_AFTER_S = 600.0  # another host's temporary directory with no heartbeat for this long is dead

_HOST = socket.gethostname()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _slurm_job() -> str | None:
    """This process's SLURM job as scontrol/scancel name it: <array job>_<task> for an array task
    (its own SLURM_JOB_ID alone can be the id of the whole array)."""
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID")


def _process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when there is no such process
    (with the pid, this names one process: a pid reused later has another start time)."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):  # a zombie: dead, not yet reaped
        return None
    return int(fields[19])


def write_atomic(path: Path, data: bytes) -> None:
    """path holds either its old content or all of `data`, never part of it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _json(obj: Any) -> bytes:
    return json.dumps(obj, indent=1, default=str).encode()


class TrialWriter:
    """A trial being written: files go to a temporary directory as they happen (the transcript
    and the model calls, flushed to disk line by line), then `commit` renames it into place, or
    `fail` keeps it under .incomplete with the reason."""

    def __init__(self, store: "Store", study: str, trial_id: str, attempt: int = 1):
        self.store, self.study, self.trial_id, self.attempt = store, study, trial_id, attempt
        (store.root / study).mkdir(parents=True, exist_ok=True)
        # An opaque name: the agent can see its workspace's host path (/proc/self/mountinfo), and the
        # trial id would tell it which arm it is in.
        self.path = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=store.root / study))
        self.started_at = _now()
        owner = {"trial_id": trial_id, "attempt": attempt, "pid": os.getpid(), "pid_start": _process_start(os.getpid()),
                 "host": _HOST, "pid_namespace": _pid_namespace(), "slurm_job": _slurm_job(), "started_at": self.started_at}
        write_atomic(self.path / "owner.json", _json(owner))
        self._messages = 0
        self._lock = threading.Lock()
        self._files: dict[str, Any] = {}
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="trial-heartbeat", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(OSError):
                os.utime(self.path / "owner.json")

    def _append(self, name: str, line: str, sync: bool = True) -> None:
        with self._lock:
            f = self._files.get(name)
            if f is None:
                f = self._files[name] = open(self.path / name, "a", encoding="utf-8")
            f.write(line + "\n")
            f.flush()
            if sync:  # a model call is paid for: it reaches the disk before the trial moves on
                os.fsync(f.fileno())

    def model_call(self, call: dict[str, Any]) -> None:
        self._append("model_calls.jsonl", json.dumps(call, default=str))

    def messages(self, messages: list) -> None:
        """Append the messages not yet written (the conversation so far)."""
        for m in messages[self._messages:]:
            self._append("transcript.jsonl", json.dumps(m.to_dict() if hasattr(m, "to_dict") else m, default=str))
        self._messages = max(self._messages, len(messages))

    def log(self, line: str) -> None:
        self._append("trial.log", f"{_now()} {line}", sync=False)

    @contextlib.contextmanager
    def capture_logs(self, *names: str) -> Iterator[None]:
        """Log records of these loggers (model retries, the evaluator) also go to trial.log."""
        writer = self

        class _ToTrialLog(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                with contextlib.suppress(Exception):
                    writer.log(f"{record.levelname.lower()} {record.name}: {record.getMessage()}")

        handler = _ToTrialLog(logging.INFO)
        loggers = [logging.getLogger(n) for n in names]
        levels = [lg.level for lg in loggers]
        for lg in loggers:
            lg.addHandler(handler)
            if lg.getEffectiveLevel() > logging.INFO:
                lg.setLevel(logging.INFO)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.removeHandler(handler)
                lg.setLevel(level)

    def write(self, name: str, data: bytes | str) -> Path:
        path = self.path / name
        write_atomic(path, data.encode() if isinstance(data, str) else data)
        return path

    def _close(self) -> None:
        self._stop.set()
        with self._lock:
            for f in self._files.values():
                with contextlib.suppress(OSError):
                    f.close()
            self._files.clear()

    def commit(self, record: TrialRecord) -> Path:
        """Write record.json last and rename the directory into place; returns the trial directory."""
        self.log(f"commit {self.trial_id}")
        self._close()
        self.write("record.json", _json(record.to_dict()))
        _fsync_dir(self.path)
        final = self.store.trial_dir(self.study, self.trial_id)
        try:
            os.rename(self.path, final)
        except OSError:  # another job finished the same trial first: keep that one, and this as an attempt
            self.path = self._move_to_incomplete({"kind": "duplicate", "cause": "duplicate",
                                                  "message": f"{final} was already complete"})
            return final
        _fsync_dir(final.parent)
        return final

    def fail(self, failure: dict[str, Any], paid: dict[str, Any] | None = None) -> Path:
        """Keep what this attempt wrote (and paid for) under .incomplete, marked with why it ended."""
        with contextlib.suppress(Exception):
            self.log(f"failed: {failure.get('kind')}: {failure.get('cause')}: {failure.get('message')}")
        self._close()
        return self._move_to_incomplete(failure, paid)

    def _move_to_incomplete(self, failure: dict[str, Any], paid: dict[str, Any] | None = None) -> Path:
        info = {"trial_id": self.trial_id, "attempt": self.attempt, "failure": failure, "paid": paid,
                "started_at": self.started_at, "ended_at": _now()}
        with contextlib.suppress(OSError):
            write_atomic(self.path / "incomplete.json", _json(info))
        return self.store._keep_incomplete(self.path, self.study, self.trial_id)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Store:
    def __init__(self, root: Path | str):
        self.root = Path(root)

    def trial_dir(self, study: str, trial_id: str) -> Path:
        return self.root / study / trial_id

    def exists(self, study: str, trial_id: str) -> bool:
        return (self.trial_dir(study, trial_id) / "record.json").is_file()

    def scan(self, study: str) -> tuple[set[str], set[str]]:
        """(ids of the complete trials, ids of trial directories without a record): one directory
        listing and one stat per trial, so resuming a large study is quick."""
        done, broken = set(), set()
        try:
            entries = list(os.scandir(self.root / study))
        except FileNotFoundError:
            return done, broken
        for e in entries:
            if not e.name.startswith(".") and e.is_dir():
                (done if os.path.isfile(os.path.join(e.path, "record.json")) else broken).add(e.name)
        return done, broken

    def begin(self, study: str, trial_id: str, attempt: int = 1) -> TrialWriter:
        return TrialWriter(self, study, trial_id, attempt)

    def failures(self, study: str, trial_id: str) -> list[dict[str, Any]]:
        """The failures of this trial's earlier, incomplete attempts, oldest first."""
        folder = self.root / study / INCOMPLETE / trial_id
        out = []
        for d in sorted(folder.glob("*"), key=lambda p: (len(p.name), p.name)):
            try:
                out.append(json.loads((d / "incomplete.json").read_text())["failure"])
            except (OSError, ValueError, KeyError, TypeError):
                out.append({"kind": "infrastructure", "cause": "node_lost", "message": f"{d}: no incomplete.json"})
        return out

    def paid_before(self, study: str, trial_id: str) -> list[dict[str, Any]]:
        """What each of this trial's incomplete attempts paid for, oldest first: {attempt, kind,
        cause, paid (a usage dict, or None)}; from incomplete.json, else its model_calls.jsonl."""
        folder = self.root / study / INCOMPLETE / trial_id
        out = []
        for d in sorted(folder.glob("*"), key=lambda p: (len(p.name), p.name)):
            try:
                info = json.loads((d / "incomplete.json").read_text())
                failure = info.get("failure") or {}
            except (OSError, ValueError, AttributeError):
                info, failure = {}, {"kind": "infrastructure", "cause": "node_lost"}
            paid = info.get("paid") if isinstance(info.get("paid"), dict) else _paid(d / "model_calls.jsonl")
            out.append({"attempt": info.get("attempt"), "kind": failure.get("kind"), "cause": failure.get("cause"),
                        "paid": paid})
        return out

    def _keep_incomplete(self, tmp: Path, study: str, trial_id: str) -> Path:
        folder = self.root / study / INCOMPLETE / trial_id
        folder.mkdir(parents=True, exist_ok=True)
        n = len(list(folder.iterdir())) + 1
        while True:
            dest = folder / str(n)
            try:
                os.rename(tmp, dest)  # fails if dest exists and is not empty
                return dest
            except OSError:
                if not tmp.exists():
                    return dest
                n += 1

    def clean_stale(self, study: str) -> list[Path]:
        """Move the temporary directories of dead runs to .incomplete (what they paid for is kept),
        marked as lost; a directory whose owner may still be running is left alone."""
        kept = []
        study_dir = self.root / study
        for tmp in study_dir.glob(f"{TMP_PREFIX}*"):
            owner_file = tmp / "owner.json"
            try:
                owner = json.loads(owner_file.read_text())
                heartbeat = owner_file.stat().st_mtime
            except (OSError, ValueError):
                owner, heartbeat = {}, _mtime(tmp)
            if _owner_alive(owner, heartbeat):
                continue
            failure = {"kind": "infrastructure", "cause": "node_lost",
                       "message": f"its process (pid {owner.get('pid')} on {owner.get('host')}) is gone"}
            info = {"trial_id": owner.get("trial_id"), "attempt": owner.get("attempt"), "failure": failure,
                    "paid": _paid(tmp / "model_calls.jsonl"), "started_at": owner.get("started_at"), "ended_at": None}
            with contextlib.suppress(OSError):
                write_atomic(tmp / "incomplete.json", _json(info))
            kept.append(self._keep_incomplete(tmp, study, owner.get("trial_id") or "unknown"))
        return kept

    def add_rescoring(self, trial_dir: Path, entry: dict[str, Any], name: str) -> Path:
        """Store a new evaluation beside the original (never replacing it)."""
        folder = Path(trial_dir) / "evaluations"
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.json"
        write_atomic(path, _json(entry))
        return path


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _owner_alive(owner: dict[str, Any], heartbeat: float) -> bool:
    if owner.get("pid") and owner.get("host") == _HOST and owner.get("pid_namespace") == _pid_namespace():
        return _process_start(owner["pid"]) == owner.get("pid_start")
    return time.time() - heartbeat < STALE_AFTER_S


def _paid(model_calls: Path) -> dict[str, Any] | None:
    """Tokens and cost of the model calls an attempt made (from its streamed model_calls.jsonl),
    the requests that failed before a reply (or instead of one) included."""
    total: dict[str, Any] = {}
    try:
        lines = model_calls.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            call = json.loads(line)
            usages = [(call.get("response") or {}).get("usage") or {}]
            usages += [f.get("usage") or {} for f in call.get("failed_attempts") or []]
        except (ValueError, AttributeError, TypeError):
            continue  # a line cut by the crash
        for usage in usages:
            for k, v in usage.items():
                if isinstance(v, (int, float)):
                    total[k] = total.get(k, 0) + v
    return total


__all__ = ["EVALUATIONS", "INDEX", "SCHEMA_VERSION", "Store", "TrialRecord", "TrialWriter", "index", "problems",
           "read_records", "write_atomic"]
