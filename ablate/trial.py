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
import importlib.metadata
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ablate import operators
from ablate import models, snapshots
from ablate.record import TrialRecord, failure_of
from ablate.sandbox import Limits, Workspace
from ablate.store import Store, TrialWriter
from ablate.harnesses import Budget, Task
from ablate import harnesses
from ablate.ablations._spec import TrialSpec, operator_of as _operator


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
                evaluate_public=lambda path: evaluate(spec, Path(path), shapes=spec.shapes["public"]),
                hidden_shapes=spec.shapes["public"] != spec.shapes["eval"],
                roofline=[{"bytes": int(op.bytes(s)), "flops": int(op.flops(s))} for s in public])
    files["task.md"] = task.prompt(Budget(**spec.budget)).encode()
    return task


class _Streamed(models.Recorder):
    """The recorder, writing each call to the trial directory as soon as it returns (or fails)."""

    def __init__(self, model, writer: TrialWriter):
        super().__init__(model)
        self.writer = writer

    def recorded(self, call):
        self.writer.model_call(call)


def run_trial(spec: TrialSpec, store: Store, progress=None, attempt: int = 1,
              failures: list[dict[str, Any]] | None = None) -> Path:
    """Run one trial and write its record; returns the record directory. An exception leaves the
    attempt under .incomplete (ablate.record.failure_of says what kind) and is re-raised.
    attempt, failures: this attempt's number and the failures of those before it, for the record."""
    env = environment()
    op = operators.resolve(spec.operator, spec.operator_set)  # once per process, from the spec alone
    task = task_for(spec, op, env["gpu"])
    budget = Budget(**spec.budget)
    harness = harnesses.build(spec.harness, spec.auxiliary_models)
    provider = models.get({**spec.model, "trial_seed": spec.seed})  # a seeded model (scripted) draws from it
    writer = store.begin(spec.study, spec.trial_id, attempt)
    model = _Streamed(provider, writer)
    writer.log(f"trial {spec.trial_id} attempt {attempt} on {env['host']} (gpu: {env['gpu']})")
    gpu_lock = None
    try:
        gpu_lock = claim_gpu(env, spec.trial_id, writer.log)  # its agent's timings and its verdict alike
        with writer.capture_logs("ablate.models", "ablate.evaluate"):
            started = datetime.now(timezone.utc).isoformat()
            # the store (other trials' records and workspaces) stays out of sight wherever it lies
            hide = [*(spec.sandbox.get("hide") or ()), str(store.root.resolve())]
            ws = Workspace.create(writer.path / "workspace", task.files, Limits(**{**spec.sandbox, "hide": hide}))

            def on_turn(result):
                writer.messages(result.messages)
                writer.log(f"turn {result.turns}: {result.usage.total_tokens} tokens, ${result.usage.cost_usd:.4f}")
                if progress:
                    progress(result)

            # kernel.py after every tool call that changed it, for every arm alike: trusted points
            # along the trial once judged (python -m ablate.rescore --snapshots)
            snaps = snapshots.Snapshots(ws, writer.path / snapshots.FOLDER)
            agent = harness.run(model, task, ws, budget, progress=on_turn, after_tool=snaps.after_tool,
                                model_config=spec.model)
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
            record = trial_record(spec, model, harness.describe(), agent, evaluation, eval_s, env,
                                  ws.describe() if hasattr(ws, "describe") else {}, started, op, attempt, failures,
                                  snaps.describe(), store.paid_before(spec.study, spec.trial_id))
            return writer.commit(record)
    except BaseException as e:
        writer.fail(failure_of(e), paid=model.paid.to_dict())
        raise
    finally:
        if gpu_lock is not None:
            gpu_lock.release()


def claim_gpu(env: dict[str, Any], trial_id: str, log):
    """Hold the trial's GPU from its agent's first turn to its verdict: the agent times its own
    kernels there and the judge times the submission, so another study (or a rescore) on the same
    GPU waits rather than timing into this one. The judges this process starts go ahead under the
    hold. Returns the lock to release, or None (no GPU; or no usable lock file, said in the record
    as env["gpu_lock"] and on stderr)."""
    if not env.get("gpu"):
        return None
    from ablate.evaluate._gpu import DeviceLock

    def note(message: str) -> None:
        log(message)
        print(f"ablate: {trial_id}: {message}", file=sys.stderr, flush=True)

    lock = DeviceLock.for_current_device()
    if lock.acquire(note, f"trial {trial_id}"):
        env["gpu_lock"] = "held"
        return lock
    env["gpu_lock"] = f"unavailable: {lock.why}"
    note(f"the GPU's lock file cannot be used ({lock.why}): nothing keeps other runs off this GPU")
    return None


def trial_record(spec: TrialSpec, model, harness: dict[str, Any], agent, evaluation: dict[str, Any], eval_s: float,
                 env: dict[str, Any], sandbox: dict[str, Any], started: str, op=None, attempt: int = 1,
                 failures: list[dict[str, Any]] | None = None, snapshots: dict[str, Any] | None = None,
                 earlier: list[dict[str, Any]] | None = None) -> TrialRecord:
    """The record of one finished trial (``model``: the recorder; ``agent``: the AgentResult;
    ``snapshots``: ablate.snapshots.Snapshots.describe(); ``earlier``: what the trial's failed
    attempts paid, Store.paid_before)."""
    op = op or _operator(spec)
    return TrialRecord(
        trial_id=spec.trial_id, study=spec.study, arm=spec.arm, match_key=spec.match_key,
        match_fields=spec.match_fields, environment_key=environment_key(env),
        operator=spec.operator, seed=spec.seed, shapes=spec.shapes, spec=asdict(spec),
        operator_source=dict(spec.operator_set), operator_files=operator_files(op),
        model={"id": model.id, "provider": spec.model.get("provider"), "name": spec.model.get("name"),
               **_attempts(model)},
        harness=harness, agent=agent.summary(),
        usage={**agent.usage.to_dict(),
               "paid": paid_summary(agent.usage, getattr(model, "lost", None) or models.Usage(), attempt, earlier)},
        end_reason=agent.end_reason, evaluation=evaluation, evaluation_s=round(eval_s, 3),
        environment=env, sandbox=sandbox, started_at=started,
        finished_at=datetime.now(timezone.utc).isoformat(), attempt=attempt, failures=list(failures or []),
        snapshots=dict(snapshots or {}),
    )


def paid_summary(used: models.Usage, lost: models.Usage, attempt: int,
                 earlier: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Everything the trial paid for: its failed attempts (kept in .incomplete) and this one, whose
    replies the agent's budget counted (``used``: every owner's) and whose failed requests it did
    not (``lost``: the infrastructure's). The record's ``usage`` beside it is ``used`` alone."""
    rows, total = [], models.Usage()
    for e in earlier or []:
        u = models.Usage.from_dict(e.get("paid"))
        total = total + u
        rows.append({"attempt": e.get("attempt"), "ended": f"{e.get('kind')}: {e.get('cause')}",
                     "total_tokens": u.total_tokens, "cost_usd": u.cost_usd})
    this = used + lost
    rows.append({"attempt": attempt, "ended": "record", "total_tokens": this.total_tokens, "cost_usd": this.cost_usd,
                 "lost_to_failed_requests": {"total_tokens": lost.total_tokens, "cost_usd": lost.cost_usd}})
    return {**(total + this).to_dict(), "by_attempt": rows}


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
