"""Reading the record store: each study's Parquet index (<study>/index.parquet, one row per trial
directory, rebuilt from the directories: only new or changed ones are read) and the typed records
read through it. The store's layout and its writing side: ablate.store, which re-exports these
names (callers import them from there).

    read_records("runs/default", evaluation="latest")   # typed records; corrupt ones reported, skipped
    index("runs/default")                               # the index as a pandas DataFrame
    problems("runs")                                    # (trial directory, what is wrong) for each corrupt one
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from ablate.record import TrialRecord

INDEX = "index.parquet"
EVALUATIONS = ("latest", "original")  # read_records' named choices; any other string is a version

log = logging.getLogger("ablate.store")  # the store's logger, by the name its callers use


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


__all__ = ["EVALUATIONS", "INDEX", "index", "problems", "read_records"]
