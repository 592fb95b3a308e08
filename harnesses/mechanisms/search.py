"""Search over candidates: every kernel tried is kept as a candidate in a lineage (id, parent,
change, evidence, status), measured by the harness itself; at submit the best correct
candidate by those measurements is promoted into kernel.py and submitted.

Statuses: ``correct`` (measured, passes), ``incorrect`` (measured, fails), then at each submit
``promoted`` for the one written into kernel.py and ``superseded`` for the other correct ones.
Promotion comes first among the submit checks, so the workflow's gate and the reviewer see the
kernel that would be submitted.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ablate.models import ToolSpec
from ablate.sandbox import Tool, ToolResult
from ablate.harnesses.mechanisms import _measure
from ablate.harnesses.mechanisms._base import Mechanism

LINEAGE = "candidates.jsonl"


@dataclass
class SearchOptions:
    max_candidates: int = 50
    margin: float = _measure.MARGIN  # a candidate must beat the incumbent by this fraction to be promoted over it


class Search(Mechanism):
    name = "search"
    Options = SearchOptions
    prompt = "prompts/search.md"
    documents = _measure.DOCUMENTS

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.candidates: list[dict[str, Any]] = []
        self.promoted: str | None = None

    def best(self) -> dict[str, Any] | None:
        """The incumbent: walking the lineage in order, a correct candidate replaces it only
        when it improves on it beyond the margin (the one promotion rule, _measure.improves)."""
        best = None
        for c in self.candidates:
            if c["evidence"]["correct"] and _measure.improves(c["evidence"]["ms"], best and best["evidence"]["ms"],
                                                              self.options.margin):
                best = c
        return best

    def tools(self, task, ws, model):
        self.ws = ws

        def candidate(args):
            if len(self.candidates) >= self.options.max_candidates:
                return ToolResult(f"candidate: the limit of {self.options.max_candidates} candidates is reached", is_error=True)
            path = str(args.get("path") or "kernel.py")
            parent = args.get("parent") or None
            if parent and parent not in {c["id"] for c in self.candidates}:
                return ToolResult(f"candidate: unknown parent {parent!r}; candidates: "
                                  f"{', '.join(c['id'] for c in self.candidates) or 'none yet'}", is_error=True)
            data = ws.read_bytes(path, max_bytes=4 << 20)
            cid = f"c{len(self.candidates) + 1}"
            ws.write(f"candidates/{cid}.py", data)
            m = _measure.measurer(ws, task).measure(f"candidates/{cid}.py")
            entry = {"id": cid, "parent": parent, "change": str(args.get("change") or "")[:500],
                     "sha256": m.sha256, "evidence": {"correct": m.correct, "ms": m.ms,
                                                       "shapes": _measure.brief(m)["shapes"], "error": m.result.get("error")},
                     "status": "correct" if m.correct else "incorrect"}
            self.candidates.append(entry)
            self._write_lineage()
            best = self.best()
            reply = dict(entry, best=best and best["id"], best_ms=best and best["evidence"]["ms"])
            return ToolResult(json.dumps(reply, indent=1), is_error=not m.correct, seconds=m.seconds,
                              gpu_seconds=m.gpu_seconds)

        spec = ToolSpec("candidate", "Keep a kernel file as a new candidate (snapshot + the harness's measurement).", {
            "type": "object", "properties": {
                "path": {"type": "string", "description": "kernel file to snapshot (default kernel.py)"},
                "parent": {"type": "string", "description": "id of the candidate this one changes, e.g. c2"},
                "change": {"type": "string", "description": "what this candidate changes and why"}},
            "required": ["change"]})
        return {"candidate": Tool(spec, candidate)}

    def _write_lineage(self) -> None:
        self.ws.write(LINEAGE, "".join(json.dumps(c) + "\n" for c in self.candidates).encode())

    def before_submit(self, state):
        best = self.best()
        if best is None:
            return ("submit refused: no correct candidate yet. Register kernels with the `candidate` tool; "
                    "the best correct one is promoted and submitted.")
        try:
            self.ws.write("kernel.py", self.ws.read_bytes(f"candidates/{best['id']}.py"))
        except OSError as e:  # kernel.py or the snapshot turned into something else (a link out, a directory)
            return f"submit refused: could not promote candidate {best['id']} into kernel.py: {e}"
        for c in self.candidates:
            if c["status"] in ("correct", "promoted", "superseded"):
                c["status"] = "promoted" if c is best else "superseded"
        self.promoted = best["id"]
        self._write_lineage()
        return None

    def use(self):
        return {"candidates": len(self.candidates), "promoted": self.promoted,
                "statuses": {c["id"]: c["status"] for c in self.candidates},
                "lineage": [{k: c[k] for k in ("id", "parent", "change", "status")} | {"ms": c["evidence"]["ms"]}
                            for c in self.candidates]}
