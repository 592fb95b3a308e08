"""The trial's identity: what a trial is (TrialSpec) and what two trials must share to be compared
(its match fields and key), computed on the study-design floor, from the operator, the harness's
rendered task and the judge's version, before anything runs."""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate import harnesses, operators
from ablate.evaluate import _reasons
from ablate.harnesses import Budget, Task


@dataclass(frozen=True)
class TrialSpec:
    study: str
    arm: str
    harness: dict[str, Any]
    model: dict[str, Any]
    operator: str
    shapes: dict[str, str]  # {"public": set shown to the agent, "eval": set judged}
    seed: int
    budget: dict[str, Any]
    sandbox: dict[str, Any] = field(default_factory=dict)
    # The node that loads this operator again in any process (operators.source_node): {} for a
    # registry operator; external problem formats and external baselines are not in the registry.
    operator_set: dict[str, Any] = field(default_factory=dict)
    scope: str = "multi_shape"  # how the study chose the shapes (ablations.SCOPES)
    # Models besides the agent's that the match shares (a reviewer's), by role; {} = none.
    auxiliary_models: dict[str, dict[str, Any]] = field(default_factory=dict)

    @functools.cached_property
    def match_fields(self) -> dict[str, Any]:
        """Everything known before the trial runs that could change its result, except the arm:
        trials with equal fields are a matched comparison. Stored in the record, so analysis can
        name the field on which two records differ. (The machine's side is ``environment_key``.)"""
        op = operator_of(self)
        public = op.shape_set(self.shapes["public"])
        ext = dict(self.operator_set.get("external_baselines") or {})  # flat: every operator; nested: one
        external = {k: v for k, v in ext.items() if not isinstance(v, dict)}
        external.update(ext.get(self.operator) if isinstance(ext.get(self.operator), dict) else {})
        files = {name: Path(path).read_bytes() for name, path in sorted(op.task_files.items())}
        prompt = Task(self.operator, op.goal, public, files, None).prompt(Budget(**self.budget))
        return {
            "study": self.study, "model": self.model.get("id"), "model_settings": _model_settings(self.model),
            "operator": self.operator, "shapes": dict(self.shapes), "seed": self.seed, "budget": dict(self.budget),
            "shape_lists": {"public": public, "eval": op.shape_set(self.shapes["eval"])},
            # the bwrap binary's path says where it is installed, not what it allows
            "sandbox": {k: v for k, v in sorted(self.sandbox.items()) if k != "bwrap"},
            "external_baselines": {name: sha(Path(path).read_bytes()) if Path(path).is_file() else f"missing: {path}"
                                   for name, path in sorted(external.items())},
            "evaluator_version": _reasons.VERSION,
            # models besides the agent's (a reviewer's) and the prompts every arm shares
            "auxiliary_models": {role: [m.get("id"), _model_settings(m)] for role, m in self.auxiliary_models.items()},
            "prompts": harnesses.core_hashes(),
            # what every arm is given (the agent sees the prompt rendered for its GPU: that is in environment_key)
            "task": {"goal": sha(op.goal.encode()), "prompt": sha(prompt.encode()),
                     "files": {name: sha(data) for name, data in files.items()}},
        }

    @property
    def match_key(self) -> str:
        return sha(json.dumps(self.match_fields, sort_keys=True, default=str).encode())[:16]

    @functools.cached_property
    def agent_key(self) -> str:
        """An external agent's name, version and configuration (each skill's, plugin's, ... content),
        hashed; "" for ablate's own loop. Not in the match key (arms that differ in one skill must
        still pair) but in the trial id, so that editing a skill re-runs exactly the arms using it."""
        return harnesses.agents.key(self.harness)

    @property
    def trial_id(self) -> str:
        """From the match key, the arm and the seed (operator and model names for the reader), and
        an external agent's configuration."""
        model = str(self.model.get("name") or self.model.get("id")).replace("/", "_")
        agent = f"-{self.agent_key}" if self.agent_key else ""
        return f"{self.operator.replace('/', '_')}--{self.arm}--{model}--s{self.seed}--{self.match_key[:8]}{agent}"


def _model_settings(model: dict[str, Any]) -> dict[str, Any]:
    # The sampling settings define "the same model" too; prices and endpoints do not.
    return {k: model.get(k) for k in ("provider", "temperature", "max_tokens", "thinking", "thinking_budget", "effort", "seed", "policy")}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def operator_of(spec: TrialSpec):
    return operators.resolve(spec.operator, spec.operator_set)  # cached: once per process
