"""Run a study: expand the config into trials, skip those already stored, run the rest."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import operators
from ablate import models, preflight
from ablate.errors import AblateError
from ablate.store import Store
from ablate.trial import TrialSpec, run_trial
import ablations


def plan(cfg: dict[str, Any]) -> list[TrialSpec]:
    """Specs for the config, after checking that every name in it exists."""
    ops = operators.load_set(cfg["operators"])  # registry names, or a KernelBench / FlashInfer source
    for op in ops:
        for which in ("public", "eval"):
            op.shape_set(cfg["operators"]["shapes"][which])
    return ablations.expand(cfg, [op.name for op in ops])


def gpu_slots(setting: Any) -> list[str | None]:
    """Which GPU each concurrent trial gets: 'auto' = every visible GPU, one trial each; an int =
    that many GPUs; on a machine without CUDA, one slot and no GPU."""
    import torch

    count = torch.cuda.device_count()
    if setting not in (None, "auto"):
        if int(setting) > max(count, 1):
            raise AblateError(f"parallel={setting} but only {count} GPU(s) are visible; use parallel=auto or fewer")
        count = int(setting) if count else 0
    return [str(i) for i in range(count)] or [None]


def _run_in_subprocess(spec: TrialSpec, store: Store, gpu: str | None) -> Path:
    import json
    import os
    import subprocess
    import tempfile
    from dataclasses import asdict

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(asdict(spec), f)
    env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}))
    try:
        out = subprocess.run([sys.executable, "-m", "ablate.trial", f.name, str(store.root)], env=env,
                             capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise AblateError(f"trial {spec.trial_id} failed on GPU {gpu}: {last}")
    return Path(out.stdout.strip().splitlines()[-1])


def run_study(cfg: dict[str, Any], store_root: Path, log=print) -> list[Path]:
    specs = plan(cfg)
    store = Store(store_root)
    todo = [s for s in specs if not store.exists(s.study, s.trial_id)]
    if len(todo) < len(specs):
        log(f"resuming: {len(specs) - len(todo)} of {len(specs)} trials already in {store.root / specs[0].study}")
    # Every model must be reachable before the first trial starts, not halfway through a sweep.
    for model_cfg in {s.model.get("name") or s.model.get("id"): s.model for s in todo}.values():
        models.preflight(model_cfg)
    preflight.before_trials(todo)  # the agent's shell has python, torch, triton (and the GPU), or one line
    slots = gpu_slots(cfg.get("parallel", "auto"))
    if len(slots) > 1 and len(todo) > 1:
        return _run_parallel(todo, store, slots, log)
    done = []
    for i, spec in enumerate(todo, 1):
        label = f"[{i}/{len(todo)}] {spec.operator} {spec.arm} {spec.model.get('name')} seed={spec.seed}"
        start = time.monotonic()
        log(f"{label} ...")

        def progress(result):
            print(f"\r  turn {result.turns}, {result.usage.total_tokens} tokens, ${result.usage.cost_usd:.2f}",
                  end="", file=sys.stderr, flush=True)

        tty = sys.stderr.isatty()  # a live turn counter on a terminal; per-trial lines in logs
        path = run_trial(spec, store, progress=progress if tty else None)
        if tty:
            print("", file=sys.stderr)
        log(_outcome(label, path, start))
        done.append(path)
    return done


def _outcome(label: str, path: Path, start: float) -> str:
    import json

    rec = json.loads((path / "record.json").read_text())
    speed = rec["evaluation"].get("geomean_speedup")
    reasons = ",".join(rec["evaluation"].get("reasons") or [])
    return (f"{label}: {rec['end_reason']}, {rec['verdict']}" + (f" ({reasons})" if reasons else "")
            + (f" {speed:.3g}x vs best library ({rec['evaluation'].get('timing')})" if speed else "")
            + f" [{time.monotonic() - start:.0f}s] -> {path}")


def _run_parallel(todo: list[TrialSpec], store: Store, slots: list[str | None], log) -> list[Path]:
    """One trial per GPU at a time, each in its own process pinned to its GPU."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    free: queue.Queue = queue.Queue()
    for s in slots:
        free.put(s)

    def one(i_spec):
        i, spec = i_spec
        gpu = free.get()
        label = f"[{i}/{len(todo)}] {spec.operator} {spec.arm} {spec.model.get('name')} seed={spec.seed} gpu={gpu}"
        start = time.monotonic()
        log(f"{label} ...")
        try:
            path = _run_in_subprocess(spec, store, gpu)
        finally:
            free.put(gpu)
        log(_outcome(label, path, start))
        return path

    with ThreadPoolExecutor(len(slots)) as pool:
        return list(pool.map(one, enumerate(todo, 1)))
