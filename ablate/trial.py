"""One trial: a harness, a model, an operator, a seed -> an agent run, a judged kernel, a record."""
from __future__ import annotations

import hashlib
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
    scope: str = "multi_shape"  # how the study chose the shapes (ablations.SCOPES)
    # Models besides the agent's that the match shares (a reviewer's), by role; {} = none.
    auxiliary_models: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def match_key(self) -> str:
        """Everything but the harness: trials with equal keys are a matched comparison."""
        scope = {"study": self.study, "model": self.model.get("id"), "model_settings": _model_settings(self.model),
                 "operator": self.operator, "shapes": self.shapes, "seed": self.seed, "budget": self.budget,
                 "auxiliary_models": {role: [m.get("id"), _model_settings(m)] for role, m in self.auxiliary_models.items()},
                 "prompts": harnesses.core_hashes()}
        return hashlib.sha256(json.dumps(scope, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @property
    def trial_id(self) -> str:
        model = str(self.model.get("name") or self.model.get("id")).replace("/", "_")
        return f"{self.operator.replace('/', '_')}--{self.arm}--{model}--s{self.seed}--{self.match_key[:8]}"


def _model_settings(model: dict[str, Any]) -> dict[str, Any]:
    # The sampling settings define "the same model" too; prices and endpoints do not.
    return {k: model.get(k) for k in ("provider", "temperature", "max_tokens", "thinking", "thinking_budget", "effort", "seed", "policy")}


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
    if spec.operator_set and spec.operator not in operators.names():
        operators.load_set(spec.operator_set)
    op = operators.get(spec.operator)
    public = op.shape_set(spec.shapes["public"])
    files = {name: Path(path).read_bytes() for name, path in op.task_files.items()}
    files["shapes.json"] = json.dumps(public, indent=1).encode()
    task = Task(spec.operator, op.goal, public, files, gpu,
                evaluate_public=lambda path: evaluate(spec, Path(path), shapes=spec.shapes["public"]),
                hidden_shapes=spec.shapes["public"] != spec.shapes["eval"],
                roofline=[{"bytes": int(op.bytes(s)), "flops": int(op.flops(s))} for s in public])
    files["task.md"] = task.prompt(Budget(**spec.budget)).encode()
    return task


def run_trial(spec: TrialSpec, store: Store, progress=None) -> Path:
    """Run one trial and write its record; returns the record directory."""
    env = environment()
    task = task_for(spec, env["gpu"])
    budget = Budget(**spec.budget)
    model = models.Recorder(models.get(spec.model))
    harness = harnesses.build(spec.harness, spec.auxiliary_models)
    tmp = store.begin(spec.study, spec.trial_id)
    try:
        started = datetime.now(timezone.utc).isoformat()
        ws = Workspace.create(tmp / "workspace", task.files, Limits(**spec.sandbox))
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
        record = {
            "trial_id": spec.trial_id, "study": spec.study, "arm": spec.arm, "match_key": spec.match_key,
            "operator": spec.operator, "seed": spec.seed, "shapes": spec.shapes, "spec": asdict(spec),
            "model": {"id": model.id, "provider": spec.model.get("provider"), "name": spec.model.get("name"),
                      "attempts": getattr(model.model, "attempts", None)},
            "harness": harness.describe(), "agent": agent.summary(), "usage": agent.usage.to_dict(),
            "end_reason": agent.end_reason, "verdict": evaluation.get("verdict"),
            "evaluation": evaluation, "evaluation_s": round(eval_s, 3), "environment": env,
            "sandbox": ws.describe() if hasattr(ws, "describe") else {}, "started_at": started,
            "finished_at": datetime.now(timezone.utc).isoformat(),
        }
        return store.commit(tmp, spec.study, spec.trial_id, record)
    except BaseException:
        store.abandon(tmp)
        raise


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
