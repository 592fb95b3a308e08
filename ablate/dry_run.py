"""`python -m ablate ... dry_run=true`: a study's plan before anything runs, then exit.

What it prints: the trials (arms x operators x shapes x seeds, per scope), how many are already
stored, an estimate of the time they take and of what the model costs, and what each estimate rests
on. Nothing is run: no preflight, no model call, no sandbox. Estimates come from two sources, named
in the output:
- the budget (`budget.wall_s`, `budget.tokens`, `budget.cost_usd`) and the model's prices
  (`price_per_mtok` in conf/model/*.yaml): ceilings, since every trial stops at its budget;
- measured trials committed in benchmarks/results (MEASURED): the only typical figures there are,
  and only for the scripted policy. No trial of an API model has been measured.
"""
from __future__ import annotations

import os
from typing import Any

from ablate import runner
from ablate.trial import TrialSpec

# Seconds a trial took, (fastest, mean, slowest), where they were measured.
MEASURED = {
    "scripted-gpu": ((26, 63, 106), "the scripted policy on an H200: 7 RMSNorm trials of study=justgoal, "
                                    "benchmarks/results/h200-study; contractions and each operator's first trial "
                                    "(cold library baselines) take longer"),
    "scripted-cpu-smoke": ((7, 18, 26), "the default study on 2 shared CPU cores: 4 trials in 71 s, "
                                        "benchmarks/results/default-study-cpu"),
}


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _dollars(x: float) -> str:
    return f"${x:,.2f}" if x < 100 else f"${x:,.0f}"


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _scope_line(scope: str, specs: list[TrialSpec]) -> str:
    ops = sorted({s.operator for s in specs})
    sets = sorted({(s.operator, s.shapes["public"], s.shapes["eval"]) for s in specs})
    seeds, arms = sorted({s.seed for s in specs}), sorted({s.arm for s in specs})
    if len(sets) == len(ops):
        names = sorted({(s.shapes["public"], s.shapes["eval"]) for s in specs})
        shown = "; ".join(f"'{p}' shown, '{e}' judged" for p, e in names)
        what = f"{_n(len(ops), 'operator')} x 1 shape set ({shown})"
    else:
        what = f"{_n(len(sets), 'eval shape')} over {_n(len(ops), 'operator')} (one a trial, shown and judged)"
    return f"  {scope}: {what} x {_n(len(seeds), 'seed')} x {_n(len(arms), 'arm')} = {_n(len(specs), 'trial')}"


def _models(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    model = cfg.get("model") or cfg["study"].get("model") or {}
    return [model] + ([dict(cfg["reviewer_model"])] if cfg.get("reviewer_model") else [])


def time_lines(cfg: dict[str, Any], todo: list[TrialSpec], slots: list[str | None], gpu: bool) -> list[str]:
    n = len(todo)
    if not n:
        return ["time: none (every trial is stored)"]
    wall = cfg["budget"].get("wall_s")
    at_once = len(slots) if gpu else 1
    where = (f"{_n(at_once, 'GPU')} here, a trial on each at a time (parallel={cfg.get('parallel', 'auto')})" if gpu
             else "no GPU here: Triton's CPU interpreter, one trial at a time, timings cpu-interpreted")
    provider = (cfg.get("model") or cfg["study"].get("model") or {}).get("provider")
    smoke = all(s.shapes["eval"] == "smoke" for s in todo)
    lines = [f"time ({where}):"]

    def measured(key: str, label: str) -> str:
        (low, mean, high), source = MEASURED[key]
        return (f"  {label}: about {duration(n * mean / (at_once if gpu else 1))} ({n} x {mean} s; {low}-{high} s a "
                f"trial, measured: {source})")

    if provider == "scripted":
        if smoke and not gpu:
            lines.append(measured("scripted-cpu-smoke", "here"))
        elif not gpu:
            lines.append("  here: not measured for the scripted policy on public/eval shapes in the CPU interpreter; "
                         "expect hours a trial")
        if gpu or not smoke:
            lines.append(measured("scripted-gpu", "here" if gpu else "on one H200"))
    else:
        lines.append("  no trial of an API model has been measured (benchmarks/results holds none): only the "
                     "budget's ceiling")
    if wall:
        lines.append(f"  at most {duration(n * float(wall) / at_once)} ({n} x budget.wall_s {float(wall):g} s"
                     f"{f' / {at_once} GPUs' if at_once > 1 else ''}), plus judging each kernel, which the budget "
                     f"does not bound (5-41 s a trial in benchmarks/results/h200-study)")
    else:
        lines.append("  no ceiling: budget.wall_s is null")
    lines.append("  on a cluster, one trial a GPU: python -m ablate -m hydra/launcher=slurm ...")
    return lines


def cost_lines(cfg: dict[str, Any], n: int) -> list[str]:
    from ablate.models._pricing import PRICE_KEYS

    models = _models(cfg)
    providers = {m.get("provider") for m in models}
    if providers <= {"scripted", "replay"}:
        return ["model cost: $0 (the scripted policy and replayed calls use no API)"]
    rates = [float((m.get("price_per_mtok") or {}).get(k) or 0.0) for m in models for k in PRICE_KEYS]
    names = ", ".join(str(m.get("name") or m.get("id")) for m in models)
    if max(rates, default=0.0) == 0.0:
        return [f"model cost: $0 ({names}: price_per_mtok is 0, e.g. a local server)"]
    budget = cfg["budget"]
    dearest = max(rates)
    caps = []
    if budget.get("cost_usd") is not None:
        caps.append((float(budget["cost_usd"]), f"budget.cost_usd {_dollars(float(budget['cost_usd']))}"))
    if budget.get("tokens") is not None:
        caps.append((int(budget["tokens"]) * dearest / 1e6,
                     f"budget.tokens {int(budget['tokens']):,} at the dearest rate of {names}, ${dearest:g} per "
                     f"million tokens"))
    if not caps:
        return [f"model cost: unbounded: the budget sets neither tokens nor cost_usd ({names} at up to "
                f"${dearest:g} per million tokens)"]
    per_trial, why = min(caps)
    lines = [f"model cost: at most {_dollars(n * per_trial)} ({n} trials x {_dollars(per_trial)}, {why}; every "
             f"model call of every mechanism draws on it, and a trial stops before a call that could cross it)"]
    lines.append("  no trial of an API model has been measured (benchmarks/results holds none): this is the "
                 "budget's ceiling, not a forecast")
    for env in dict.fromkeys(m.get("api_key_env") for m in models):
        if env and not os.environ.get(env):
            lines.append(f"  note: {env} is not set: a run would stop before its first trial")
    return lines


def text(cfg: dict[str, Any]) -> str:
    """The plan of the study `cfg` (a resolved config, as runner.config_dict gives it)."""
    import torch

    notes: list[str] = []
    specs, todo = runner.pending(cfg, cfg["store"], log=notes.append)
    study = cfg["study"]["name"]
    model = (cfg.get("model") or cfg["study"].get("model") or {})
    gpu = torch.cuda.is_available()
    slots = runner.gpu_slots(cfg.get("parallel", "auto"))
    lines = [f"dry run (nothing runs): study {study}, model {model.get('name')} ({model.get('id')}, "
             f"{model.get('provider')})"]
    if not specs:
        return "\n".join(lines + ["no trials: the study plans none"])
    arms = list(dict.fromkeys(s.arm for s in specs))
    ops = list(dict.fromkeys(s.operator for s in specs))
    lines.append(f"arms ({len(arms)}): {', '.join(arms)}")
    lines.append(f"operators ({len(ops)}): {', '.join(ops)}")
    lines.append(f"seeds: {', '.join(str(s) for s in sorted({s.seed for s in specs}))}")
    lines.append("trials:")
    for scope in dict.fromkeys(s.scope for s in specs):
        lines.append(_scope_line(scope, [s for s in specs if s.scope == scope]))
    where = f"{cfg['store']}/{study}"
    lines.append(f"  {len(specs)} planned, {len(specs) - len(todo)} already stored in {where}, {len(todo)} to run")
    lines += [f"  {n}" for n in notes]
    budget = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                       for k, v in cfg["budget"].items() if v is not None)
    lines.append(f"budget per trial (every arm the same): {budget}")
    lines += time_lines(cfg, todo, slots, gpu)
    lines += cost_lines(cfg, len(todo))
    note = runner.smoke_note(cfg, gpu)
    if note:
        lines.append(note)
    lines.append("to run it: the same command without dry_run=true")
    return "\n".join(lines)
