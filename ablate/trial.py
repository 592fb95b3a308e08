"""One trial: a harness, a model, an operator, a seed -> an agent run, a judged kernel, a record.

The trial writes as it goes (ablate.store.TrialWriter): every model call and the conversation reach
the disk when they happen, so an attempt that dies keeps what it paid for; the record is written
last and the directory renamed into place. `python -m ablate.trial SPEC.json STORE` runs one trial
in a process of its own (the runner's parallel slots, one GPU each) and reports on stdout, one
JSON object a line: {"event": "turn", ...}, then {"event": "done", "path"} or {"event": "failed",
"failure"}.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import operators
from ablate import models
from ablate.record import TrialRecord, failure_of
from ablate.sandbox import Limits, Workspace
from ablate.store import Store, TrialWriter
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
    # The node that loads this operator again in any process (operators.source_node): {} for a
    # registry operator; external problem formats and external baselines are not in the registry.
    operator_set: dict[str, Any] = field(default_factory=dict)

    @property
    def match_key(self) -> str:
        """Everything but the harness: trials with equal keys are a matched comparison."""
        scope = {"study": self.study, "model": self.model.get("id"), "model_settings": _model_settings(self.model),
                 "operator": self.operator, "shapes": self.shapes, "seed": self.seed, "budget": self.budget}
        return hashlib.sha256(json.dumps(scope, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @property
    def trial_id(self) -> str:
        """From the match key, the arm and the seed (operator and model names for the reader)."""
        model = str(self.model.get("name") or self.model.get("id")).replace("/", "_")
        return f"{self.operator.replace('/', '_')}--{self.arm}--{model}--s{self.seed}--{self.match_key[:8]}"


def _model_settings(model: dict[str, Any]) -> dict[str, Any]:
    # The sampling settings define "the same model" too; prices and endpoints do not.
    return {k: model.get(k) for k in ("provider", "temperature", "max_tokens", "thinking", "thinking_budget", "effort", "seed", "policy")}


def environment() -> dict[str, Any]:
    import torch
    import triton

    env = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
           "host": platform.node(), "gpu": None, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    job = {k.lower(): os.environ[k] for k in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
                                               "SLURM_RESTART_COUNT") if k in os.environ}
    if job:
        env["slurm"] = job
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


def evaluate(spec: TrialSpec, path: Path, shapes: str, progress=None) -> dict[str, Any]:
    from ablate.evaluate import evaluate as judge  # the trusted evaluator, in its own processes

    return judge(spec.operator, path, shapes=shapes, operator_set=spec.operator_set or None, progress=progress)


def task_for(spec: TrialSpec, op: operators.Operator, gpu: str | None) -> Task:
    public = op.shape_set(spec.shapes["public"])
    files = {name: Path(path).read_bytes() for name, path in op.task_files.items()}
    files["shapes.json"] = json.dumps(public, indent=1).encode()
    task = Task(spec.operator, op.goal, public, files, gpu,
                evaluate_public=lambda path: evaluate(spec, Path(path), shapes=spec.shapes["public"]))
    files["task.md"] = task.prompt(Budget(**spec.budget)).encode()
    return task


class _Streamed(models.Recorder):
    """The recorder, writing each call to the trial directory as soon as it returns."""

    def __init__(self, model, writer: TrialWriter):
        super().__init__(model)
        self.writer = writer

    def generate(self, system, messages, tools):
        response = super().generate(system, messages, tools)
        self.writer.model_call(self.calls[-1])
        return response


def run_trial(spec: TrialSpec, store: Store, progress=None, attempt: int = 1,
              failures: list[dict[str, Any]] | None = None) -> Path:
    """Run one trial and write its record; returns the record directory. An exception leaves the
    attempt under .incomplete (ablate.record.failure_of says what kind) and is re-raised.
    attempt, failures: this attempt's number and the failures of those before it, for the record."""
    env = environment()
    op = operators.resolve(spec.operator, spec.operator_set)  # once per process, from the spec alone
    task = task_for(spec, op, env["gpu"])
    budget = Budget(**spec.budget)
    harness = harnesses.build(spec.harness)
    provider = models.get(spec.model)
    writer = store.begin(spec.study, spec.trial_id, attempt)
    model = _Streamed(provider, writer)
    writer.log(f"trial {spec.trial_id} attempt {attempt} on {env['host']} (gpu: {env['gpu']})")
    try:
        with writer.capture_logs("ablate.models", "ablate.evaluate"):
            started = datetime.now(timezone.utc).isoformat()
            ws = Workspace.create(writer.path / "workspace", task.files, Limits(**spec.sandbox))

            def on_turn(result):
                writer.messages(result.messages)
                writer.log(f"turn {result.turns}: {result.usage.total_tokens} tokens, ${result.usage.cost_usd:.4f}")
                if progress:
                    progress(result)

            agent = harness.run(model, task, ws, budget, progress=on_turn)
            writer.messages(agent.messages)
            writer.log(f"agent ended: {agent.end_reason} after {agent.turns} turns")
            t0 = time.monotonic()
            try:  # through the workspace's safe reader: kernel.py may be a symlink planted by the agent
                submitted = ws.read_bytes("kernel.py", max_bytes=4 << 20)
            except OSError:
                submitted = None
            if submitted is not None:
                kernel = writer.write("kernel.py", submitted)
                evaluation = evaluate(spec, kernel, shapes=spec.shapes["eval"], progress=writer.log)
            else:
                evaluation = {"verdict": "rejected", "reasons": ["no_submission"], "shapes": [], "timing": "none"}
            eval_s = time.monotonic() - t0
            writer.log(f"verdict: {evaluation.get('verdict')} {','.join(evaluation.get('reasons') or [])}")
            writer.write("evaluation.json", json.dumps(evaluation, indent=1, default=str))
            record = TrialRecord(
                trial_id=spec.trial_id, study=spec.study, arm=spec.arm, match_key=spec.match_key,
                operator=spec.operator, seed=spec.seed, shapes=spec.shapes, spec=asdict(spec),
                operator_source=dict(spec.operator_set), operator_files=operator_files(op),
                model={"id": model.id, "provider": spec.model.get("provider"), "name": spec.model.get("name"),
                       **_attempts(model)},
                harness=harness.describe(), agent=agent.summary(), usage=agent.usage.to_dict(),
                end_reason=agent.end_reason, evaluation=evaluation, evaluation_s=round(eval_s, 3),
                environment=env, sandbox=ws.describe() if hasattr(ws, "describe") else {}, started_at=started,
                finished_at=datetime.now(timezone.utc).isoformat(), attempt=attempt, failures=list(failures or []),
            )
            return writer.commit(record)
    except BaseException as e:
        writer.fail(failure_of(e), paid=model.usage.to_dict())
        raise


def _attempts(model: _Streamed) -> dict[str, Any]:
    """API requests made (retries included) and how many were retries; None for local models."""
    attempts = getattr(model.model, "attempts", None)
    return {"attempts": attempts, "retries": None if attempts is None else max(0, attempts - len(model.calls))}


def operator_files(op: operators.Operator) -> dict[str, str]:
    """sha256 of each file the agent was given, so a later reader can tell the operator changed."""
    out = {}
    for name, path in sorted(op.task_files.items()):
        try:
            out[name] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            out[name] = None
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m ablate.trial SPEC.json STORE [ATTEMPT FAILURES.json]`: one trial in a process of
    its own. Exit 0: done; 2: the user must act (the error on stderr); 3: failed, worth a retry."""
    from ablate.errors import AblateError
    from ablate.record import retriable

    args = argv if argv is not None else sys.argv[1:]
    spec = TrialSpec(**json.loads(Path(args[0]).read_text()))
    attempt = int(args[2]) if len(args) > 2 else 1
    failures = json.loads(Path(args[3]).read_text()) if len(args) > 3 else []

    def report(event: dict[str, Any]) -> None:
        print(json.dumps(event, default=str), flush=True)

    def progress(result):
        report({"event": "turn", "turns": result.turns, "tokens": result.usage.total_tokens,
                "cost_usd": result.usage.cost_usd})

    try:
        path = run_trial(spec, Store(args[1]), progress=progress, attempt=attempt, failures=failures)
    except Exception as e:  # noqa: BLE001 - classified, reported, and the attempt is kept
        failure = failure_of(e)
        report({"event": "failed", "failure": failure})
        if isinstance(e, AblateError) and not retriable(failure):
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 3
    report({"event": "done", "path": str(path)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
