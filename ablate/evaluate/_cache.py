"""Measurements worth keeping between evaluations (GPU ceilings, baseline times), as JSON files
under ~/.cache/ablate/ (or $ABLATE_CACHE_DIR). The candidate process never sees this directory."""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("ABLATE_CACHE_DIR") or Path.home() / ".cache" / "ablate")


def _path(name: str) -> Path:
    return cache_dir() / f"{name}.json"


def get(name: str, key: str):
    try:
        return json.loads(_path(name).read_text()).get(key)
    except (OSError, ValueError):
        return None


def put(name: str, key: str, value) -> None:
    """Read-merge-write under a lock, replaced atomically: several evaluations may write at once."""
    path = _path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        data[key] = value
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
