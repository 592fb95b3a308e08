"""Synthetic trial records, written by the trial's own record-building code (``ablate.trial``).

    write_trial(store, arm="kda05", seed=0, speedup=2.0)                  # accepted at 2.0x
    write_trial(store, arm="kda05", seed=1, outcome="rejected")           # as a rejected trial is written
    write_study(store, arms={"goal_only": 1.0, "kda05": 1.2}, operators=[...], seeds=5, sd=0.1)

The records are those ``run_trial`` writes (``trial_record``, ``TrialWriter.commit``): a real TrialSpec
(and so real match fields), an AgentResult, an evaluation shaped as the evaluator's (a rejected
one untimed, ``timing: "none"``, as real rejections are), the environment of a GPU or a CPU
machine. Used by the analysis tests, the notebook test and the analysis speed benchmark.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ablate._numbers import geomean
from ablate.models import Message, ToolCall, Usage
from ablate.store import Store
from ablate.record import TrialRecord
from ablate.trial import TrialSpec, trial_record
from ablate.operators._baselines import NOT_LOADED
from ablate.harnesses import AgentResult

GPU_ENV = {"python": "3.11.7", "torch": "2.11.0+cu130", "triton": "3.6.0", "host": "node1", "gpu": "NVIDIA H200",
           "cuda": "13.0", "driver": "580.159.04"}
CPU_ENV = {"python": "3.11.7", "torch": "2.13.0+cpu", "triton": "3.9.0", "host": "laptop", "gpu": None}
MODEL = {"name": "scripted", "provider": "scripted", "id": "scripted-kernel-search-v1", "policy": "kernel-search"}
REASONS = {"rejected": ["incorrect"], "crashed": ["crash"], "no_submission": ["no_submission"]}


def spec(arm: str, seed: int, operator: str = "rmsnorm", study: str = "study", shapes: str = "smoke",
         budget: dict | None = None, harness: dict | None = None, model: dict | None = None, **kw) -> TrialSpec:
    return TrialSpec(study=study, arm=arm, harness=harness or {"name": arm, "mechanisms": {}}, model=model or MODEL,
                     operator=operator, shapes={"public": "public" if shapes == "eval" else shapes, "eval": shapes},
                     seed=seed, budget=budget or {"turns": 10}, sandbox=kw.pop("sandbox", {}),
                     operator_set={"names": [operator], "shapes": {"public": shapes, "eval": shapes}}, **kw)


def evaluation(s: TrialSpec, outcome: str, speedup: float | None, gpu: bool,
               shape_speedups: list[float] | None = None, sol: float = 0.5, not_loaded: tuple[str, ...] = ()) -> dict[str, Any]:
    """An evaluator result as the evaluator writes it (the keys analysis reads). not_loaded: the
    libraries that were installed but failed to import, left out as the judge leaves them out."""
    shapes = s.match_fields["shape_lists"]["eval"]
    if outcome == "no_submission":  # as run_trial writes it
        return {"verdict": "rejected", "reasons": ["no_submission"], "shapes": [], "timing": "none"}
    if outcome != "accepted":  # rejected before timing: per-shape correctness, no times
        return {"verdict": "rejected", "reasons": REASONS[outcome], "timing": "none", "operator": s.operator,
                "shapes": [{"shape": sh, "shape_id": _sid(sh), "correct": False, "error": "max error 0.3"} for sh in shapes],
                "geomean_speedup": None}
    per = shape_speedups or [speedup] * len(shapes)
    flags = {"flags": ["baseline_not_loaded"]} if not_loaded else {}  # the judge's, on each row and the trial
    out = []
    for sh, sp in zip(shapes, per):
        base = 0.1
        libs = {k: v for k, v in {"torch_eager": base * 3, "liger": base}.items() if k not in not_loaded}
        best = min(libs, key=libs.get)
        out.append({"shape": sh, "shape_id": _sid(sh), "correct": True, "max_abs_error": 0.004, "error": None,
                    "time_ms": {"median": libs[best] / sp}, "baselines_ms": libs,
                    "baselines_skipped": {k: f"{k} {NOT_LOADED}: synthetic" for k in not_loaded},
                    "best_baseline": best, "speedup_vs_best": sp, "sol_fraction": min(1.0, sol * sp), **flags})
    return {"verdict": "accepted", "reasons": [], "operator": s.operator, "timing": "judge-clock" if gpu else "cpu-interpreted",
            "device": {"name": GPU_ENV["gpu"]} if gpu else {}, "shapes": out,
            "geomean_speedup": geomean(float(x) for x in per), **flags}


def _sid(shape: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def write_trial(store: Path | str, arm: str, seed: int, speedup: float | None = None, outcome: str = "accepted",
                operator: str = "rmsnorm", gpu: bool = True, end_reason: str | None = None, env: dict | None = None,
                tokens: int = 1000, cost_usd: float = 0.5, turns: int = 7, events: list | None = None,
                evaluate_calls: list[float] | None = None, shape_speedups: list[float] | None = None,
                record_extra: dict | None = None, not_loaded: tuple[str, ...] = (), mechanisms: dict | None = None,
                **spec_kw) -> Path:
    """One trial record; ``evaluate_calls``: speedups the agent's evaluate tool returned, one per turn;
    ``mechanisms``: each mechanism's use as the harness records it (``agent.mechanisms``); ``scope``
    and the other TrialSpec fields through ``spec_kw`` (a single_shape trial: ``scope="single_shape",
    shapes="eval[M=...]"``, see ``single_shapes``)."""
    s = spec(arm, seed, operator, **spec_kw)
    st = Store(store)
    writer = st.begin(s.study, s.trial_id)
    tmp = writer.path
    ev = evaluation(s, outcome, speedup, gpu, shape_speedups, not_loaded=not_loaded)
    messages = [Message(role="user", content=f"Operator: {operator}")]
    calls = []
    for i, sp in enumerate(evaluate_calls or []):
        call = ToolCall(id=f"c{i}", name="evaluate", arguments={})
        messages.append(Message(role="assistant", content="evaluating", tool_calls=[call]))
        messages.append(Message(role="tool", tool_call_id=call.id, content=json.dumps(
            {"verdict": "accepted" if sp else "rejected", "geomean_speedup": sp})))
    n_calls = max(turns, len(evaluate_calls or []))
    for i in range(n_calls):
        calls.append({"request": {}, "response": {"usage": {"total_tokens": tokens // n_calls, "cost_usd": cost_usd / n_calls}}})
    usage = Usage(input_tokens=tokens, cost_usd=cost_usd, calls=n_calls)
    agent = AgentResult(messages=messages, end_reason=end_reason or ("submitted" if outcome != "no_submission" else "model_stopped"),
                        turns=turns, usage=usage, wall_s=60.0, tool_s=30.0, gpu_s=20.0 if gpu else 0.0,
                        submitted=outcome != "no_submission", events=list(events or []), mechanisms=dict(mechanisms or {}))
    (tmp / "evaluation.json").write_text(json.dumps(ev))
    with open(tmp / "transcript.jsonl", "w") as f:
        for m in messages:
            f.write(json.dumps(m.to_dict(), default=str) + "\n")
    with open(tmp / "model_calls.jsonl", "w") as f:
        for c in calls:
            f.write(json.dumps(c) + "\n")
    if outcome != "no_submission":
        (tmp / "kernel.py").write_text("import triton\n\ndef kernel(x, w):\n    return x  # synthetic\n")
    model = SimpleNamespace(id=s.model["id"], model=SimpleNamespace(attempts=n_calls), calls=calls)
    rec = trial_record(s, model, {**s.harness}, agent, ev, 1.0, dict(env or (GPU_ENV if gpu else CPU_ENV)),
                       {"confinement": "bwrap"}, "2026-12-01T00:00:00+00:00")
    if record_extra:
        rec = TrialRecord.from_dict({**rec.to_dict(), **record_extra})
    return writer.commit(rec)


def single_shapes(operator: str, shape_set: str = "eval") -> list[str]:
    """The shape-set names of a single_shape study's trials of ``operator`` (one per shape), as
    ``ablations.scope_shapes`` names them."""
    from ablate import operators as registry

    return [f"{shape_set}[{registry.shape_id(sh)}]" for sh in registry.get(operator).shape_set(shape_set)]


def write_study(store: Path | str, arms: dict[str, float], operators: list[str], seeds: int, sd: float = 0.1,
                reject: float = 0.0, rng: np.random.Generator | None = None, **kw) -> None:
    """A study whose arm ``a`` has true speedup ``arms[a]`` on every operator, each trial's log
    speedup off it by N(0, sd), and a chance ``reject`` of being rejected."""
    rng = rng or np.random.default_rng(0)
    for op in operators:
        for seed in range(seeds):
            for arm, true in arms.items():
                rejected = rng.random() < reject
                sp = float(true * np.exp(rng.normal(0, sd)))
                write_trial(store, arm, seed, None if rejected else sp, "rejected" if rejected else "accepted",
                            operator=op, evaluate_calls=[sp * 0.8, sp * 0.9], **kw)
