"""The harness's own measurements (correctness and time of a kernel file on the public shapes),
shared by the mechanisms that need them (workflow, search) so a kernel is measured once per trial.

The measurement runs in the agent's sandbox (it executes the agent's code); its seconds are
charged to the tool that asked for it. It is the harness's evidence for its own decisions; the
trial's verdict comes from the trusted evaluator alone.
"""
from __future__ import annotations

import hashlib
import json
import shlex
import weakref
from dataclasses import dataclass
from typing import Any

from ablate.sandbox import Workspace
from ablate.harnesses import _documents
from ablate.harnesses._task import Task

SCRIPT = "scripts/measure.py"
DOCUMENTS = (SCRIPT,)
MARGIN = 0.02  # a new candidate must be this much faster to replace the incumbent: run-to-run noise


@dataclass
class Measurement:
    sha256: str
    result: dict[str, Any]  # the script's report: shapes, correct, ms (geomean), device
    seconds: float = 0.0  # spent producing it now (0 when it came from the cache)
    gpu_seconds: float = 0.0

    @property
    def correct(self) -> bool:
        return bool(self.result.get("correct"))

    @property
    def ms(self) -> float | None:
        return self.result.get("ms")


def improves(new_ms: float | None, incumbent_ms: float | None, margin: float = MARGIN) -> bool:
    """The one promotion rule: measured, and faster than the incumbent beyond the noise margin."""
    if new_ms is None:
        return False
    return incumbent_ms is None or new_ms < incumbent_ms * (1.0 - margin)


PRIVATE = ".harness"  # the pristine reference and shapes, rewritten before every measurement


class Measurer:
    """Measures against the task's own reference.py and public shapes, not the workspace's copies
    (which the agent may edit): both are rewritten under .harness/ before every run, and no agent
    process outlives its command to change them in between."""

    def __init__(self, ws: Workspace, task: Task, reps: int = 5):
        self.ws, self.task, self.reps = ws, task, reps
        self.cache: dict[str, dict[str, Any]] = {}

    def measure(self, rel: str) -> Measurement:
        data = self.ws.read_bytes(rel, max_bytes=4 << 20)
        sha = hashlib.sha256(data).hexdigest()
        if sha in self.cache:
            return Measurement(sha, self.cache[sha])
        script = _documents.text(SCRIPT)
        self.ws.write(f"{PRIVATE}/reference.py", self.task.files.get("reference.py", b""))
        self.ws.write(f"{PRIVATE}/shapes.json", json.dumps(self.task.public_shapes).encode())
        r = self.ws.run(f"python -c {shlex.quote(script)} {shlex.quote(rel)} {self.reps}")
        line = next((ln for ln in reversed(r.output.splitlines()) if ln.startswith("MEASURE ")), None)
        if line is None:
            status = "timed out" if r.timed_out else f"exit code {r.exit_code}"
            result = {"correct": False, "ms": None, "shapes": [], "error": f"measurement failed ({status}): {r.output[-800:]}"}
        else:
            result = json.loads(line.removeprefix("MEASURE "))
        self.cache[sha] = result
        return Measurement(sha, result, r.seconds, r.gpu_seconds)


_measurers: "weakref.WeakKeyDictionary[Workspace, Measurer]" = weakref.WeakKeyDictionary()


def measurer(ws: Workspace, task: Task) -> Measurer:
    """The trial's one measurer (its cache shared by every mechanism of the trial)."""
    if ws not in _measurers:
        _measurers[ws] = Measurer(ws, task)
    return _measurers[ws]


def brief(m: Measurement) -> dict[str, Any]:
    """What the agent is told about a measurement."""
    r = m.result
    return {"correct": m.correct, "ms": m.ms, "error": r.get("error"),
            "shapes": [{k: s.get(k) for k in ("shape", "correct", "max_err", "ms", "error")} for s in r.get("shapes", [])]}
