"""The trial record: one typed, versioned schema, written by the trial and read by the runner,
rescore and analysis (through ``ablate.store.read_records``).

    rec = TrialRecord.from_dict(json.loads(path.read_text()))   # any schema version still stored
    rec.verdict, rec.evaluation["geomean_speedup"], rec.resolve_operator()

Version history (``from_dict`` upgrades every older one):
  1  the first store: the operator's set node inside ``spec.operator_set``, a top-level ``verdict``.
  2  ``operator_source`` (the one operator's node, absolute paths) and ``operator_files`` (sha256 of
     the files the agent saw), ``attempt`` and ``failures`` (the failures of earlier attempts),
     ``environment_key``. The stored top-level ``verdict`` is a copy of the evaluation's, for
     plain-JSON readers; the typed record derives it from the evaluation it holds.
     Later, optional (absent in older version-2 records, read as empty): ``snapshots``, the
     copies of kernel.py taken along the trial (ablate.snapshots).

Failures are classified here, once: an infrastructure failure (the model API down after its
retries, the evaluator broken, the node or process lost) says nothing about the agent; it never
becomes a record, only an incomplete attempt kept beside the study, and the trial is retried. What
the agent did (ran out of budget, submitted nothing, submitted a wrong kernel) is a complete record.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2

# Failure kinds: "infrastructure" (causes below) and "crash" (an unexpected exception: out of memory,
# a full disk, a bug) are retried and never a verdict; "error" is the user's to fix (a bad config, a
# diverged replay): retrying cannot help, so the study stops and says why.
FAILURE_KINDS = ("infrastructure", "crash", "error")
INFRASTRUCTURE_CAUSES = ("api_outage", "evaluator_failure", "node_lost", "interrupted")


@dataclass
class TrialRecord:
    trial_id: str
    study: str
    arm: str
    match_key: str
    operator: str
    seed: int
    # Identity above (required); what the trial did below.
    shapes: dict[str, str] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)  # the TrialSpec as run: harness, model, budget, sandbox, operator
    model: dict[str, Any] = field(default_factory=dict)  # id, provider, name, attempts (API calls incl. retries), retries
    harness: dict[str, Any] = field(default_factory=dict)  # harness.describe(), as it comes
    agent: dict[str, Any] = field(default_factory=dict)  # the agent result's summary(), as it comes (mechanism use)
    usage: dict[str, Any] = field(default_factory=dict)  # tokens, cost, calls
    end_reason: str | None = None  # how the agent's run ended: submitted, a budget name, model_stopped, ...
    evaluation: dict[str, Any] = field(default_factory=dict)  # the evaluator's JSON (when read: the one asked for)
    environment: dict[str, Any] = field(default_factory=dict)  # GPU, driver, library versions, host
    operator_source: dict[str, Any] = field(default_factory=dict)  # operators.resolve(operator, this)
    operator_files: dict[str, str] = field(default_factory=dict)  # task file name -> sha256
    match_fields: dict[str, Any] = field(default_factory=dict)  # what the match key hashes, by name
    environment_key: dict[str, Any] | None = None  # the machine's side: GPU, driver, library versions
    sandbox: dict[str, Any] = field(default_factory=dict)
    evaluation_s: float | None = None
    started_at: str | None = None
    finished_at: str | None = None
    attempt: int = 1  # 1 + the failed attempts before this one
    failures: list[dict[str, Any]] = field(default_factory=list)  # those attempts' failures
    snapshots: dict[str, Any] = field(default_factory=dict)  # kernel.py along the trial (ablate.snapshots)
    schema: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # fields this version does not know, kept
    # Set when read, never stored: which evaluation `evaluation` is ("original" or a rescoring's
    # file name), every rescoring beside the original, and the trial directory.
    evaluation_source: str = "original"
    rescorings: list[dict[str, Any]] = field(default_factory=list)
    path: Path | None = None

    _READ_ONLY = ("evaluation_source", "rescorings", "path", "extra")

    @property
    def verdict(self) -> str | None:
        return (self.evaluation or {}).get("verdict")

    @property
    def evaluator_version(self) -> str | None:
        return (self.evaluation or {}).get("evaluator_version")

    def resolve_operator(self):
        """The trial's operator, from this record alone (KernelBench and FlashInfer ones too)."""
        from ablate import operators

        return operators.resolve(self.operator, self.operator_source)

    def to_dict(self) -> dict[str, Any]:
        """What record.json holds: the stored fields (and unknown ones read from a newer writer)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in self._READ_ONLY}
        out = {"schema": SCHEMA_VERSION, **{k: v for k, v in out.items() if k != "schema"}, "verdict": self.verdict}
        return {**self.extra, **out}

    def as_row(self) -> dict[str, Any]:
        """to_dict() plus `evaluation_source` and `_dir`, for code that reads records as plain dicts."""
        return {**self.to_dict(), "evaluation_source": self.evaluation_source, "_dir": str(self.path) if self.path else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any], path: Path | None = None) -> "TrialRecord":
        """A record of any stored schema version; raises ValueError naming what is wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"record is a JSON {type(d).__name__}, not an object")
        d = {"schema": 1, **d}  # a record without a version is of the first kind
        version = d["schema"]
        if version not in _UPGRADES and version != SCHEMA_VERSION:
            raise ValueError(f"unknown record schema {version!r} (this version reads 1-{SCHEMA_VERSION})")
        while d.get("schema") != SCHEMA_VERSION:
            d = _UPGRADES[d["schema"]](d)
        known = {f.name for f in dataclasses.fields(cls)} - set(cls._READ_ONLY)
        missing = [f.name for f in dataclasses.fields(cls) if f.name in known and f.name not in d
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ValueError(f"record lacks {', '.join(missing)}")
        rec = cls(**{k: v for k, v in d.items() if k in known},
                  extra={k: v for k, v in d.items() if k not in known and k != "verdict"}, path=path)
        for name in ("shapes", "spec", "model", "harness", "agent", "usage", "evaluation", "environment"):
            if not isinstance(getattr(rec, name), dict):
                raise ValueError(f"record's {name} is not an object")
        return rec


def _from_v1(d: dict[str, Any]) -> dict[str, Any]:
    from ablate import operators

    d = dict(d)
    d.pop("verdict", None)  # derived from the evaluation now
    # The v1 record kept the whole operator set; the part of it that loads this one operator:
    d["operator_source"] = operators.narrow(d["operator"], (d.get("spec") or {}).get("operator_set"))
    d["schema"] = 2
    return d


_UPGRADES = {1: _from_v1}


def failure_of(exc: BaseException) -> dict[str, Any]:
    """{kind, cause, message} for an exception that ended a trial before its record was written."""
    from ablate.errors import AblateError
    from ablate.evaluate import EvaluatorFailure
    from ablate.models import ProviderOutage

    message = f"{type(exc).__name__}: {exc}"[:2000]
    if isinstance(exc, ProviderOutage):
        cause = "api_outage"
    elif isinstance(exc, EvaluatorFailure):
        cause = "evaluator_failure"
    elif isinstance(exc, (KeyboardInterrupt, SystemExit)):
        # Ctrl-C, or a signal turned into an exit: SLURM's pre-emption or time-limit signal (submitit)
        return {"kind": "infrastructure", "cause": "interrupted",
                "message": f"stopped by {'Ctrl-C' if isinstance(exc, KeyboardInterrupt) else f'exit({exc.code})'}"}
    elif isinstance(exc, AblateError):
        return {"kind": "error", "cause": "user", "message": message}
    else:
        return {"kind": "crash", "cause": type(exc).__name__, "message": message}
    return {"kind": "infrastructure", "cause": cause, "message": message}


def retriable(failure: dict[str, Any]) -> bool:
    return failure.get("kind") != "error"
