"""The record store: one directory per trial, written atomically, read by analysis.

    runs/<study>/<trial_id>/record.json        spec, match key, model, usage, end reason, evaluation, environment
                          /transcript.jsonl    the conversation, one message per line
                          /model_calls.jsonl   every request/response (replayable)
                          /kernel.py           the submission (if any)
                          /evaluation.json     the evaluator's JSON
                          /workspace/          the agent's final workspace
A trial directory exists only once complete (it is built under a temporary name and renamed),
so a crashed run leaves nothing half-written and a resumed run redoes exactly the missing trials.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


class Store:
    def __init__(self, root: Path | str):
        self.root = Path(root)

    def trial_dir(self, study: str, trial_id: str) -> Path:
        return self.root / study / trial_id

    def exists(self, study: str, trial_id: str) -> bool:
        return (self.trial_dir(study, trial_id) / "record.json").is_file()

    def begin(self, study: str, trial_id: str) -> Path:
        (self.root / study).mkdir(parents=True, exist_ok=True)
        # An opaque name: the agent can see its workspace's host path (/proc/self/mountinfo), and the
        # trial id would tell it which arm it is in.
        return Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root / study))

    def commit(self, tmp: Path, study: str, trial_id: str, record: dict[str, Any]) -> Path:
        record = {"schema": SCHEMA_VERSION, **record}
        (tmp / "record.json").write_text(json.dumps(record, indent=1, default=str))
        final = self.trial_dir(study, trial_id)
        try:
            os.rename(tmp, final)
        except OSError:  # another job finished the same trial first: keep the one already there
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def abandon(self, tmp: Path) -> None:
        shutil.rmtree(tmp, ignore_errors=True)


def read_records(path: Path | str) -> list[dict[str, Any]]:
    """Every complete record under a study directory (or the whole store)."""
    records = []
    for p in sorted(Path(path).rglob("record.json")):
        if any(part.startswith(".tmp-") for part in p.parts):
            continue
        rec = json.loads(p.read_text())
        rec["_dir"] = str(p.parent)
        records.append(rec)
    return records
