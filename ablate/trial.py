"""One trial: a harness, a model, an operator, a seed -> an agent run, a judged kernel, a record."""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import platform
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import operators
from ablate import models
from ablate.sandbox import Limits, Workspace
from ablate.store import Store
from harnesses import Budget, Task
import harnesses


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
    # The conf/operators node the operator came from, so another process (a trial on another GPU)
    # can load it again: external problem formats and external baselines are not in the registry.
    operator_set: dict[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def match_fields(self) -> dict[str, Any]:
        """Everything known before the trial runs that could change its result, except the arm:
        trials with equal fields are a matched comparison. Stored in the record, so analysis can
        name the field on which two records differ. (The machine's side is ``environment_key``.)"""
        op = _operator(self)
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
            "external_baselines": {name: _sha(Path(path).read_bytes()) if Path(path).is_file() else f"missing: {path}"
                                   for name, path in sorted(external.items())},
            "evaluator_version": str(getattr(_evaluator(), "VERSION", "1")),
            # what every arm is given (the agent sees the prompt rendered for its GPU: that is in environment_key)
            "task": {"goal": _sha(op.goal.encode()), "prompt": _sha(prompt.encode()),
                     "files": {name: _sha(data) for name, data in files.items()}},
        }

    @property
    def match_key(self) -> str:
        return _sha(json.dumps(self.match_fields, sort_keys=True, default=str).encode())[:16]

    @property
    def trial_id(self) -> str:
        model = str(self.model.get("name") or self.model.get("id")).replace("/", "_")
        return f"{self.operator.replace('/', '_')}--{self.arm}--{model}--s{self.seed}--{self.match_key[:8]}"


def _model_settings(model: dict[str, Any]) -> dict[str, Any]:
    # The sampling settings define "the same model" too; prices and endpoints do not.
    return {k: model.get(k) for k in ("provider", "temperature", "max_tokens", "thinking", "thinking_budget", "effort", "seed", "policy")}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _evaluator():
    import ablate.evaluate

    return ablate.evaluate


def _operator(spec: TrialSpec):
    if spec.operator_set and spec.operator not in operators.names():
        operators.load_set(spec.operator_set)
    return operators.get(spec.operator)


# Libraries whose version can change a baseline's time, and so a speedup.
LIBRARIES = ("liger-kernel", "quack-kernels", "cupy-cuda12x", "cupy-cuda13x", "flash-attn", "flashinfer-python")


def environment_key(env: dict[str, Any]) -> dict[str, Any]:
    """The run-time half of the match key: what the machine adds (GPU, driver, library versions).
    Known only where the trial runs, so trial ids (planned on any machine) do not depend on it."""
    key = {k: env.get(k) for k in ("gpu", "driver", "cuda", "torch", "triton", "python")}
    for lib in LIBRARIES:
        try:
            key[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            key[lib] = None
    return key


def environment() -> dict[str, Any]:
    import torch
    import triton

    env = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
           "host": platform.node(), "gpu": None}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
        try:
            import subprocess

            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
        except Exception:  # noqa: BLE001 - the driver version is informative only
            env["driver"] = None
    return env


def evaluate(spec: TrialSpec, path: Path, shapes: str) -> dict[str, Any]:
    from ablate.evaluate import evaluate as judge  # the trusted evaluator, in its own processes

    return judge(spec.operator, path, shapes=shapes, operator_set=spec.operator_set or None)


def task_for(spec: TrialSpec, gpu: str | None) -> Task:
    op = _operator(spec)
    public = op.shape_set(spec.shapes["public"])
    files = {name: Path(path).read_bytes() for name, path in op.task_files.items()}
    files["shapes.json"] = json.dumps(public, indent=1).encode()
    task = Task(spec.operator, op.goal, public, files, gpu,
                evaluate_public=lambda path: evaluate(spec, Path(path), shapes=spec.shapes["public"]))
    files["task.md"] = task.prompt(Budget(**spec.budget)).encode()
    return task


def run_trial(spec: TrialSpec, store: Store, progress=None) -> Path:
    """Run one trial and write its record; returns the record directory."""
    env = environment()
    task = task_for(spec, env["gpu"])
    budget = Budget(**spec.budget)
    model = models.Recorder(models.get(spec.model))
    harness = harnesses.build(spec.harness)
    tmp = store.begin(spec.study, spec.trial_id)
    try:
        started = datetime.now(timezone.utc).isoformat()
        # the store (other trials' records and workspaces) stays out of sight wherever it lies
        hide = [*(spec.sandbox.get("hide") or ()), str(store.root.resolve())]
        ws = Workspace.create(tmp / "workspace", task.files, Limits(**{**spec.sandbox, "hide": hide}))
        agent = harness.run(model, task, ws, budget, progress=progress)
        t0 = time.monotonic()
        try:  # through the workspace's safe reader: kernel.py may be a symlink planted by the agent
            submitted = ws.read_bytes("kernel.py", max_bytes=4 << 20)
        except OSError:
            submitted = None
        if submitted is not None:
            (tmp / "kernel.py").write_bytes(submitted)
            evaluation = evaluate(spec, tmp / "kernel.py", shapes=spec.shapes["eval"])
        else:
            evaluation = {"verdict": "rejected", "reasons": ["no_submission"], "shapes": [], "timing": "none"}
        eval_s = time.monotonic() - t0
        (tmp / "evaluation.json").write_text(json.dumps(evaluation, indent=1, default=str))
        with open(tmp / "transcript.jsonl", "w") as f:
            for m in agent.messages:
                f.write(json.dumps(m.to_dict(), default=str) + "\n")
        model.write(tmp / "model_calls.jsonl")
        record = trial_record(spec, model, harness.describe(), agent, evaluation, eval_s, env,
                              ws.describe() if hasattr(ws, "describe") else {}, started)
        return store.commit(tmp, spec.study, spec.trial_id, record)
    except BaseException:
        store.abandon(tmp)
        raise


def trial_record(spec: TrialSpec, model, harness: dict[str, Any], agent, evaluation: dict[str, Any], eval_s: float,
                 env: dict[str, Any], sandbox: dict[str, Any], started: str) -> dict[str, Any]:
    """The record of one finished trial (``model``: the Recorder; ``agent``: the AgentResult)."""
    return {
        "trial_id": spec.trial_id, "study": spec.study, "arm": spec.arm, "match_key": spec.match_key,
        "match_fields": spec.match_fields, "environment_key": environment_key(env),
        "operator": spec.operator, "seed": spec.seed, "shapes": spec.shapes, "spec": asdict(spec),
        "model": {"id": model.id, "provider": spec.model.get("provider"), "name": spec.model.get("name"),
                  "attempts": getattr(model.model, "attempts", None)},
        "harness": harness, "agent": agent.summary(), "usage": agent.usage.to_dict(),
        "end_reason": agent.end_reason, "verdict": evaluation.get("verdict"),
        "evaluation": evaluation, "evaluation_s": round(eval_s, 3), "environment": env,
        "sandbox": sandbox, "started_at": started, "finished_at": datetime.now(timezone.utc).isoformat(),
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m ablate.trial SPEC.json STORE`: one trial in a process of its own (used by the
    runner to run trials on several GPUs at once, one GPU each via CUDA_VISIBLE_DEVICES)."""
    import sys

    from ablate.errors import AblateError

    spec_path, store_root = (argv if argv is not None else sys.argv[1:])[:2]
    spec = TrialSpec(**json.loads(Path(spec_path).read_text()))
    try:
        print(run_trial(spec, Store(store_root)))
    except AblateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
