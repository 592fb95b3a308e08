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

from ablate.record import SCHEMA_VERSION, TrialRecord

INDEX = "index.parquet"
INCOMPLETE = ".incomplete"
TMP_PREFIX = ".tmp-"
HEARTBEAT_S = 30.0  # a running trial touches its owner.json this often
STALE_AFTER_S = 600.0  # another host's temporary directory with no heartbeat for this long is dead
EVALUATIONS = ("latest", "original")  # read_records' named choices; any other string is a version

log = logging.getLogger("ablate.store")
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


# --- reading ---------------------------------------------------------------------------------

def _stamp(d: str) -> str | None:
    """What changes when a trial directory's record or rescorings change."""
    try:
        st = os.stat(os.path.join(d, "record.json"))
    except OSError:
        return None
    try:
        ev = os.stat(os.path.join(d, "evaluations")).st_mtime_ns
    except OSError:
        ev = 0
    # ctime too: an edit that keeps the size and puts the mtime back (cp -p, touch -r) still changes it
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{ev}"


def _read_trial(d: Path) -> dict[str, Any]:
    """One index row: the record's text, its rescorings, a few flat columns; `error` when corrupt."""
    row: dict[str, Any] = {"dir": d.name, "stamp": _stamp(str(d)), "error": None, "record": None, "rescorings": None}
    try:
        text = (d / "record.json").read_text()
        rec = TrialRecord.from_dict(json.loads(text), path=d)
    except FileNotFoundError:
        row["error"] = "no record.json"
        return row
    except (OSError, UnicodeDecodeError) as e:
        row["error"] = f"record.json unreadable ({e})"
        return row
    except json.JSONDecodeError as e:
        row["error"] = f"record.json is not valid JSON ({e.msg}, line {e.lineno})"
        return row
    except (ValueError, TypeError) as e:
        row["error"] = f"record.json is not a trial record ({e})"
        return row
    rescorings = []
    for p in sorted((d / "evaluations").glob("*.json")):
        try:
            entry = json.loads(p.read_text())
            if not isinstance(entry.get("evaluation"), dict):
                raise ValueError("no evaluation object")
        except (OSError, ValueError, AttributeError) as e:
            log.warning("skipped %s: not a rescoring (%s)", p, e)
            continue
        rescorings.append({**entry, "name": p.stem})
    row.update(record=text, rescorings=json.dumps(rescorings, default=str) if rescorings else None,
               **_columns(rec))
    return row


def _columns(rec: TrialRecord) -> dict[str, Any]:
    ev = rec.evaluation or {}
    return {"trial_id": rec.trial_id, "study": rec.study, "arm": rec.arm, "operator": rec.operator, "seed": rec.seed,
            "match_key": rec.match_key, "model": (rec.model or {}).get("id"), "end_reason": rec.end_reason,
            "verdict": rec.verdict, "timing": ev.get("timing"), "speedup": ev.get("geomean_speedup"),
            "evaluator_version": ev.get("evaluator_version"), "tokens": (rec.usage or {}).get("total_tokens"),
            "cost_usd": (rec.usage or {}).get("cost_usd"), "attempt": rec.attempt, "schema": rec.schema}


_INDEX_COLUMNS = ["dir", "stamp", "error", "trial_id", "study", "arm", "operator", "seed", "match_key", "model",
                  "end_reason", "verdict", "timing", "speedup", "evaluator_version", "tokens", "cost_usd", "attempt",
                  "schema", "record", "rescorings"]


def index(study_dir: Path | str, write: bool = True):
    """The study's index as a pandas DataFrame, one row per trial directory (corrupt ones with
    `error` set), brought up to date with the directories: only new or changed ones are read.
    Written to <study>/index.parquet when anything changed (skipped if the store is read-only)."""
    import pandas as pd

    return pd.DataFrame(_rows(Path(study_dir), write), columns=_INDEX_COLUMNS)


def _rows(study_dir: Path, write: bool = True) -> list[dict[str, Any]]:
    entries = {}
    with contextlib.suppress(FileNotFoundError):
        for e in os.scandir(study_dir):
            # a trial directory exists only once its record is written (the rename is the commit):
            # a directory without one is not a trial (analysis writes report/ beside them)
            if not e.name.startswith(".") and e.is_dir() and os.path.lexists(os.path.join(e.path, "record.json")):
                entries[e.name] = e.path
    old = _read_index(study_dir / INDEX)
    old_rows = {} if old is None else {r["dir"]: r for r in old}
    rows, changed = [], old is None or set(old_rows) != set(entries)
    for name in sorted(entries):
        prev = old_rows.get(name)
        if prev is not None and prev["stamp"] is not None and prev["stamp"] == _stamp(entries[name]):
            rows.append(prev)
        else:
            rows.append(_read_trial(Path(entries[name])))
            changed = True
    if changed and write and entries:
        _write_index(rows, study_dir / INDEX)
    return rows


def _read_index(path: Path) -> list[dict[str, Any]] | None:
    import pyarrow.parquet as pq

    if not path.is_file():
        return None
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - a damaged index is rebuilt from the directories
        log.warning("rebuilding %s: unreadable (%s)", path, e)
        return None
    if table.column_names != _INDEX_COLUMNS:
        return None  # written by another version: rebuild
    return table.to_pylist()


def _write_index(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        schema = pa.schema([(c, pa.int64() if c in ("seed", "attempt", "schema", "tokens") else
                             pa.float64() if c in ("speedup", "cost_usd") else pa.string()) for c in _INDEX_COLUMNS])
        table = pa.Table.from_pylist([{c: r.get(c) for c in _INDEX_COLUMNS} for r in rows], schema=schema)
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except (OSError, pa.ArrowException, ValueError, TypeError) as e:
        log.warning("index %s not written (%s); it is rebuilt from the trial directories next time", path, e)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _study_dirs(path: Path) -> list[Path]:
    """The study directories under `path`: itself when it holds trials, else its subdirectories."""
    children = [Path(e.path) for e in os.scandir(path) if not e.name.startswith(".") and e.is_dir()]
    if (path / INDEX).is_file() or any((c / "record.json").exists() for c in children):
        return [path]
    return sorted(children)


def problems(path: Path | str) -> list[tuple[str, str]]:
    """(trial directory, what is wrong) for every corrupt trial directory under `path`."""
    out = []
    for study in _study_dirs(Path(path)):
        out += [(str(study / r["dir"]), r["error"]) for r in _rows(study) if r["error"]]
    return out


def read_records(path: Path | str, evaluation: str = "latest") -> list[TrialRecord]:
    """Every complete trial record under a study directory, the whole store, or one trial directory.

    evaluation: which evaluation each record's `evaluation` holds (the others stay in
    `rescorings`; `evaluation_source` names the one chosen):
      "latest"    the newest rescoring (ablate.rescore), else the original
      "original"  the one the trial was judged with when it ran
      a version   the newest evaluation with that `evaluator_version`; records without one are
                  left out (and counted in a warning), so figures of two versions never mix
    Corrupt trial directories are reported (a warning each) and skipped.
    """
    path = Path(path)
    if (path / "record.json").is_file():
        rows = [_read_trial(path)]
        rows[0]["dir"] = str(path)
        studies = [(path.parent, rows)]
    elif path.is_dir():
        studies = [(s, _rows(s)) for s in _study_dirs(path)]
    else:
        raise FileNotFoundError(f"{path}: no such store, study or trial directory")
    records, missing = [], 0
    for study, rows in studies:
        for row in rows:
            d = study / row["dir"]
            if row["error"]:
                log.warning("skipped %s: %s (fix it, or move the directory out of the study)", d, row["error"])
                continue
            rec = TrialRecord.from_dict(json.loads(row["record"]), path=d)
            rec.rescorings = json.loads(row["rescorings"]) if row["rescorings"] else []
            if not _select(rec, evaluation):
                missing += 1
                continue
            records.append(rec)
    if missing:
        log.warning("%d trial(s) have no evaluation by evaluator version %s: left out (python -m ablate.rescore %s "
                    "re-judges them)", missing, evaluation, path)
    return records


def _select(rec: TrialRecord, evaluation: str) -> bool:
    """Put the chosen evaluation in rec.evaluation; False when the record has none of that version."""
    def order(r: dict[str, Any]) -> tuple:
        return (str(r.get("rescored_at") or ""), r["name"])

    rescorings = sorted(rec.rescorings, key=order)
    if evaluation == "original":
        return True
    if evaluation == "latest":
        chosen = rescorings[-1] if rescorings else None
    else:
        chosen = next((r for r in reversed(rescorings) if r["evaluation"].get("evaluator_version") == evaluation), None)
        if chosen is None:
            return rec.evaluator_version == evaluation
    if chosen is not None:
        rec.evaluation, rec.evaluation_source = chosen["evaluation"], chosen["name"]
    return True


__all__ = ["INDEX", "SCHEMA_VERSION", "Store", "TrialRecord", "TrialWriter", "index", "problems", "read_records",
           "write_atomic"]
