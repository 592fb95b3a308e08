"""Records -> tidy pandas frames. The one place analysis reads the store.

    records, skipped = load(path)       # every readable record; [(where, why)] for the rest
    trials = trial_frame(records)       # a row per trial
    shapes = shape_frame(records)       # a row per (trial, shape), with the shape's role
    progress, use = activity(records)   # evaluations during each trial; mechanism use

Every trial gets an ``outcome`` (its score follows from it: ``scoring.score``):
``accepted``; ``rejected`` (the evaluator judged the kernel and rejected it); ``crashed`` (the
kernel crashed, hung or ran out of memory, or the trial has no evaluation at all);
``no_submission`` (no kernel.py at the end). ``budget_exhausted`` says, beside the outcome,
whether a budget limit ended the trial. ``timing`` is the kind of figure the trial's study
produces, from the device it ran on (a GPU name in its environment: ``cuda``; none:
``cpu-interpreted``), so a rejected trial, which the evaluator never timed, still belongs to
its study's kind and pairs with its match. ``scope``, ``shapes`` and ``shape`` say how its study
chose the shapes (``design``); ``evaluation`` which of its evaluations the figures come from.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ablate import snapshots
from ablate._numbers import geomean
from ablate.store import problems, read_records

BUDGETS = ("turns", "tokens", "cost_usd", "wall_s", "tool_s", "gpu_s")  # end reasons that are budget limits
CRASHES = ("crash", "timeout", "oom")  # evaluator reasons for a kernel that did not finish
REQUIRED = ("trial_id", "arm", "operator", "seed")


def load(path: Path | str, evaluation: str = "latest") -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Every complete record under ``path`` and, for each one that cannot be used, (where, why).

    Reads through the store's own reader (typed records, as dicts here), which names and skips a
    corrupt trial directory; `evaluation` picks the original judgement or a rescoring ("latest",
    "original", or an evaluator version: see ablate.store.read_records)."""
    path = Path(path)
    store_log = logging.getLogger("ablate.store")
    level, store_log.level = store_log.level, logging.ERROR  # its warnings are listed below, once
    try:
        records = [r.as_row() for r in read_records(path, evaluation)]
    finally:
        store_log.setLevel(level)
    skipped: list[tuple[str, str]] = [
        (str(Path(d) / "record.json"), ("unreadable: " if "JSON" in why or "unreadable" in why else "partial record: ") + why)
        for d, why in problems(path)]
    dirs = {r["_dir"] for r in records if isinstance(r, dict) and r.get("_dir")}
    good = []
    for r in records:
        outer = _enclosing(r.get("_dir", ""), dirs) if isinstance(r, dict) else None
        # A record.json inside another trial's directory was written by that trial's agent (its
        # workspace is stored there): a forged record, never a trial.
        why = f"inside trial {os.path.basename(outer)}'s directory: written by its agent, not by the runner" if outer else _invalid(r)
        if why:
            skipped.append((str(Path(r.get("_dir", "?")) / "record.json") if isinstance(r, dict) else "?", why))
        else:
            good.append(_clean(r))
    return good, skipped


def _enclosing(d: str, dirs: set[str]) -> str | None:
    """The trial directory that holds directory ``d``, if any."""
    parent = os.path.dirname(d)
    while parent and parent != d:
        if parent in dirs:
            return parent
        d, parent = parent, os.path.dirname(parent)
    return None


def _invalid(r: Any) -> str | None:
    if not isinstance(r, dict):
        return "not a JSON object"
    missing = [k for k in REQUIRED if r.get(k) is None]
    if missing:
        return f"partial record: no {', '.join(missing)}"
    if r.get("evaluation") is not None and not isinstance(r["evaluation"], dict):
        return f"partial record: evaluation is a {type(r['evaluation']).__name__}, not an object"
    try:
        int(r["seed"])
    except (TypeError, ValueError):
        return f"partial record: seed {r['seed']!r} is not an integer"
    return None


def _dict(x: Any) -> dict:
    return x if isinstance(x, dict) else {}


def _dicts(x: Any) -> list[dict]:
    return [i for i in x if isinstance(i, dict)] if isinstance(x, list) else []


def _clean(r: dict[str, Any]) -> dict[str, Any]:
    """The record with every part analysis reads in the type it expects: a damaged part (a
    string where an object belongs, a list of non-objects) reads as absent, never as a crash."""
    r = dict(r, seed=int(r["seed"]), arm=str(r["arm"]), operator=str(r["operator"]), trial_id=str(r["trial_id"]))
    ev = dict(_dict(r.get("evaluation")))
    if ev:
        ev["reasons"] = [str(x) for x in ev.get("reasons")] if isinstance(ev.get("reasons"), list) else []
        ev["details"] = _dict(ev.get("details"))
        ev["device"] = _dict(ev.get("device"))
        shapes = []
        for sh in _dicts(ev.get("shapes")):
            sh = dict(sh, time_ms=_dict(sh.get("time_ms")), baselines_ms=_dict(sh.get("baselines_ms")))
            sh["shape_id"] = None if sh.get("shape_id") is None else str(sh["shape_id"])
            sh["best_baseline"] = sh["best_baseline"] if isinstance(sh.get("best_baseline"), str) else None
            shapes.append(sh)
        ev["shapes"] = shapes
        r["evaluation"] = ev
    agent = dict(_dict(r.get("agent")))
    agent["events"] = _dicts(agent.get("events"))
    agent["spent"] = {str(k): v for k, v in _dict(agent.get("spent")).items() if isinstance(v, dict)}
    # each mechanism's use (harnesses: Mechanism.use), by mechanism name
    agent["mechanisms"] = {str(k): {**v, **({"events": _dicts(v["events"])} if "events" in v else {})}
                           for k, v in _dict(agent.get("mechanisms")).items() if isinstance(v, dict)}
    r["agent"] = agent
    for k in ("usage", "environment", "model", "sandbox", "spec", "shapes"):
        r[k] = _dict(r.get(k))
    for k in ("match_fields", "environment_key", "harness"):
        r[k] = r[k] if isinstance(r.get(k), dict) else None
    return r


def design(r: dict[str, Any]) -> tuple[str, str, str]:
    """(scope, shape set, shape) of a trial: how its study chose the shapes (the spec's
    ``scope``; inferred for records written before it was stored), the judged set's name, and
    for a single_shape trial its one shape ("" otherwise): ``eval[M=8,N=512]`` is ("single_shape",
    "eval", "M=8,N=512")."""
    name = str((r.get("shapes") or {}).get("eval") or "")
    set_name, bracket, rest = name.partition("[")
    shape = rest[:-1] if bracket and rest.endswith("]") else ""
    scope = (r.get("spec") or {}).get("scope")
    if not isinstance(scope, str) or not scope:
        scope = "single_shape" if shape else "smoke" if set_name == "smoke" else "multi_shape"
    return scope, set_name or "unknown", shape


def timing_kind(r: dict[str, Any]) -> str:
    """The kind of figure the trial's study produces: ``cuda`` on a GPU, else ``cpu-interpreted``."""
    env = r.get("environment") or {}
    ev = r.get("evaluation") or {}
    if "gpu" in env:
        return "cuda" if env["gpu"] else "cpu-interpreted"
    if (ev.get("device") or {}).get("name"):  # records without an environment section
        return "cuda"
    return "cpu-interpreted" if ev.get("timing") in (None, "none", "cpu-interpreted") else "cuda"


def outcome(r: dict[str, Any]) -> str:
    ev = r.get("evaluation") or {}
    reasons = set(ev.get("reasons") or [])
    if ev.get("verdict") == "accepted":
        return "accepted"
    if "no_submission" in reasons:
        return "no_submission"
    if not ev.get("verdict") or reasons & set(CRASHES):
        return "crashed"
    return "rejected"


def harness_identity(h: dict[str, Any] | None) -> str:
    """What makes an arm the arm: its mechanisms, their options, its documents' hashes."""
    return hashlib.sha256(json.dumps(h or {}, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _geomean(values) -> float:
    """ablate._numbers.geomean of the finite positive numbers among the values; NaN without any."""
    g = geomean([float(x) for x in values if isinstance(x, (int, float)) and np.isfinite(x) and x > 0])
    return float("nan") if g is None else g


def _num(x, default=np.nan) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else default


def trial_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per trial."""
    rows = []
    for r in records:
        ev, usage, agent = r.get("evaluation") or {}, r.get("usage") or {}, r.get("agent") or {}
        shapes = [s for s in ev.get("shapes") or [] if isinstance(s, dict)]
        env = r.get("environment") or {}
        scope, shape_set, shape = design(r)
        rows.append({
            "trial_id": r["trial_id"], "study": r.get("study"), "arm": r["arm"],
            "scope": scope, "shapes": shape_set, "shape": shape,
            "harness_id": harness_identity(r.get("harness")),
            "model": (r.get("model") or {}).get("id"), "operator": r["operator"], "seed": int(r["seed"]),
            "match_key": r.get("match_key"), "timing": timing_kind(r), "device": env.get("gpu") or "cpu",
            "outcome": outcome(r), "verdict": ev.get("verdict"), "reasons": ",".join(ev.get("reasons") or []),
            "end_reason": r.get("end_reason"), "budget_exhausted": r.get("end_reason") in BUDGETS,
            "speedup": _num(ev.get("geomean_speedup")) if ev.get("verdict") == "accepted" else np.nan,
            "sol": _geomean([s.get("sol_fraction") for s in shapes]) if ev.get("verdict") == "accepted" else np.nan,
            "shapes_judged": len(shapes), "shapes_correct": sum(bool(s.get("correct")) for s in shapes),
            "tokens": _num(usage.get("total_tokens"), 0.0), "cost_usd": _num(usage.get("cost_usd"), 0.0),
            "turns": _num(agent.get("turns")), "wall_s": _num(agent.get("wall_s")), "tool_s": _num(agent.get("tool_s")),
            "gpu_s": _num(agent.get("gpu_s")), "evaluation_s": _num(r.get("evaluation_s")),
            "flags": ",".join(evaluation_flags(r)),
            # which evaluation these figures come from: "original" or a rescoring's name (ablate.rescore)
            "evaluation": str(r.get("evaluation_source") or "original"), "evaluator_version": ev.get("evaluator_version"),
            # the libraries its speedups are against: two trials compared must have the same ones
            "libraries": ",".join(sorted({lib for s in shapes for lib in (s.get("baselines_ms") or {})})),
            "key_fields": r.get("match_fields"), "environment_key": r.get("environment_key"),
            "harness": r.get("harness"), "dir": r.get("_dir"),
        })
    df = pd.DataFrame(rows, columns=TRIAL_COLUMNS)
    return _label_variants(df)


TRIAL_COLUMNS = ["trial_id", "study", "arm", "scope", "shapes", "shape", "harness_id", "model", "operator", "seed",
                 "match_key", "timing", "device", "outcome", "verdict", "reasons", "end_reason", "budget_exhausted",
                 "speedup", "sol", "shapes_judged", "shapes_correct", "tokens", "cost_usd", "turns", "wall_s", "tool_s",
                 "gpu_s", "evaluation_s", "flags", "evaluation", "evaluator_version", "libraries", "key_fields",
                 "environment_key", "harness", "dir"]


def evaluation_flags(r: dict[str, Any]) -> list[str]:
    """What the judge flagged for a human look (a speedup over 3x, a noisy best library, a GPU it
    could not lock or trace, a time at speed of light) and an unconfined candidate: the reasons a
    trial's number, though accepted, may still be wrong."""
    ev = r.get("evaluation") or {}
    flags = {str(f) for f in ev.get("flags") or () if isinstance(f, str)}
    if ev.get("sandbox") == "none":
        flags.add("unconfined_candidate")
    if str((r.get("environment") or {}).get("gpu_lock", "held")).startswith("unavailable"):
        flags.add("no_trial_gpu_lock")
    return sorted(flags)


def _label_variants(df: pd.DataFrame) -> pd.DataFrame:
    """An arm name whose records differ in their harness (mechanism options, document hashes) is
    split into ``name@identity`` variants instead of being pooled; ``arm_variants`` says so."""
    df = df.copy()
    df["arm_name"] = df["arm"]
    if df.empty:
        return df
    ids = df.groupby("arm")["harness_id"].nunique()
    split = set(ids[ids > 1].index)
    df.loc[df["arm"].isin(split), "arm"] = df["arm"] + "@" + df["harness_id"].str[:6]
    return df


def arm_variants(df: pd.DataFrame) -> list[str]:
    """One line per arm name whose records differ in the harness, naming the differing field."""
    lines = []
    for name, g in df.groupby("arm_name"):
        if g["harness_id"].nunique() < 2:
            continue
        harnesses = list({h: d for h, d in zip(g["harness_id"], g["harness"])}.values())
        field = _first_difference(harnesses[0] or {}, harnesses[1] or {})
        lines.append(f"arm {name}: records differ in harness.{field}; shown as separate arms "
                     f"({', '.join(sorted(set(g['arm'])))}), not pooled")
    return lines


def _first_difference(a: Any, b: Any, prefix: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))
    return prefix or "(value)"


def first_difference(a: Any, b: Any) -> str:
    """The dotted name of the first field where two key dicts differ."""
    return _first_difference(a, b)


def shape_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (trial, judged shape). ``role``: ``public`` (shown to the agent), ``hidden``
    (judged only), or ``single`` (the trial's only shape); ``unknown`` when the record does not
    carry its shape lists."""
    rows = []
    for r in records:
        ev = r.get("evaluation") or {}
        shapes = [s for s in ev.get("shapes") or [] if isinstance(s, dict)]
        public = _public_ids(r)
        for s in shapes:
            sid = s.get("shape_id")
            if len(shapes) == 1:
                role = "single"
            elif public is None:
                role = "unknown"
            else:
                role = "public" if sid in public else "hidden"
            best = s.get("best_baseline")
            base_ms = (s.get("baselines_ms") or {}).get(best) if best else None
            rows.append({
                "trial_id": r["trial_id"], "arm": r["arm"], "model": (r.get("model") or {}).get("id"),
                "operator": r["operator"], "seed": int(r["seed"]), "timing": timing_kind(r),
                "verdict": ev.get("verdict"), "shape_id": sid, "role": role, "correct": bool(s.get("correct")),
                "max_abs_error": _num(s.get("max_abs_error")), "time_ms": _num((s.get("time_ms") or {}).get("median")),
                "best_baseline": best, "baseline_ms": _num(base_ms), "speedup": _num(s.get("speedup_vs_best")),
                "sol": _num(s.get("sol_fraction")),
            })
    return pd.DataFrame(rows, columns=SHAPE_COLUMNS)


SHAPE_COLUMNS = ["trial_id", "arm", "model", "operator", "seed", "timing", "verdict", "shape_id", "role", "correct",
                 "max_abs_error", "time_ms", "best_baseline", "baseline_ms", "speedup", "sol"]


def _shape_id(shape: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())  # operators._operator.shape_id's format


def _public_ids(r: dict[str, Any]) -> set[str] | None:
    fields = r.get("match_fields") or {}
    lists = fields.get("shape_lists")
    if isinstance(lists, dict) and isinstance(lists.get("public"), list):
        return {_shape_id(s) for s in lists["public"] if isinstance(s, dict)}
    names = r.get("shapes") or {}
    if isinstance(names, dict) and names.get("public") and names.get("public") == names.get("eval"):
        return {s.get("shape_id") for s in (r.get("evaluation") or {}).get("shapes") or [] if isinstance(s, dict)}
    return None


def activity(records: list[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What happened during each trial, from its transcript, model calls and mechanism records.

    progress: a row per trusted evaluation during a trial with what had been spent when it came
    back: the agent's ``evaluate`` tool results (public shapes), evaluation events the harness
    recorded (``agent.events`` or a mechanism's, when they carry a speedup and a turn), the
    trusted judgements of the kernel.py snapshots taken along the trial (``snapshot``: public
    shapes, at the spend recorded with the snapshot; those of the final evaluation's device and
    evaluator version only, see ``_snapshot_points``), and the final judgement (``final``: eval
    shapes) at the trial's total spend.
    use: a row per (trial, what, count): tool calls (``tool:bash``), events (``event:review``) and
    the numbers of each mechanism's use in ``agent.mechanisms`` (``knowledge.queries``; a list
    counts its items: ``search.lineage``), where present."""
    progress, use = [], []
    for r in records:
        base = {"trial_id": r["trial_id"], "arm": r["arm"], "model": (r.get("model") or {}).get("id"),
                "operator": r["operator"], "seed": int(r["seed"]), "timing": timing_kind(r)}
        d = Path(r["_dir"]) if r.get("_dir") else None
        messages = transcript(d / "transcript.jsonl") if d else []
        for point in _trial_points(r, messages, d):
            progress.append({**base, **point})
        counts: dict[str, float] = {}
        for m in messages:
            for c in m["tool_calls"] if m.get("role") == "assistant" else []:
                counts[f"tool:{c.get('name')}"] = counts.get(f"tool:{c.get('name')}", 0) + 1
        for e in _events(r):
            counts[f"event:{e.get('event')}"] = counts.get(f"event:{e.get('event')}", 0) + 1
        for name, fields in (r.get("agent") or {}).get("mechanisms", {}).items():
            for k, v in fields.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    counts[f"{name}.{k}"] = float(v)
                elif isinstance(v, list) and k != "events":  # a log of queries, candidates, rounds: how many
                    counts[f"{name}.{k}"] = float(len(v))
        use += [{"trial_id": r["trial_id"], "what": k, "count": v} for k, v in counts.items()]
    return (pd.DataFrame(progress, columns=PROGRESS_COLUMNS), pd.DataFrame(use, columns=["trial_id", "what", "count"]))


PROGRESS_COLUMNS = ["trial_id", "arm", "model", "operator", "seed", "timing", "source", "turn", "tokens", "cost_usd",
                    "accepted", "speedup"]


def _events(r: dict[str, Any]) -> list[dict[str, Any]]:
    agent = r.get("agent") or {}
    events = list(agent.get("events") or [])
    for m in (agent.get("mechanisms") or {}).values():
        events += list(m.get("events") or [])
    return [e for e in events if isinstance(e, dict)]


def _trial_points(r: dict[str, Any], transcript: list[dict[str, Any]], d: Path | None) -> list[dict[str, Any]]:
    points = []
    spent = _spend_by_turn(d / "model_calls.jsonl") if d else []
    for turn, result in _evaluate_results(transcript):
        tokens, cost = spent[turn - 1] if 0 < turn <= len(spent) else (np.nan, np.nan)
        points.append({"source": "evaluate", "turn": turn, "tokens": tokens, "cost_usd": cost,
                       "accepted": result.get("verdict") == "accepted", "speedup": _num(result.get("geomean_speedup"))})
    for e in _events(r):
        value = e.get("speedup", e.get("geomean_speedup"))
        if isinstance(value, (int, float)) and isinstance(e.get("turn"), (int, float)):
            points.append({"source": str(e.get("event", "event")), "turn": e["turn"], "tokens": _num(e.get("tokens")),
                           "cost_usd": _num(e.get("cost_usd")), "accepted": e.get("verdict", "accepted") == "accepted",
                           "speedup": float(value)})
    points += _snapshot_points(r, d)
    ev, usage, agent = r.get("evaluation") or {}, r.get("usage") or {}, r.get("agent") or {}
    points.append({"source": "final", "turn": _num(agent.get("turns")), "tokens": _num(usage.get("total_tokens"), 0.0),
                   "cost_usd": _num(usage.get("cost_usd"), 0.0), "accepted": ev.get("verdict") == "accepted",
                   "speedup": _num(ev.get("geomean_speedup"))})
    return points


def _snapshot_points(r: dict[str, Any], d: Path | None) -> list[dict[str, Any]]:
    """A point per snapshot the record lists and ``python -m ablate.rescore --snapshots`` judged:
    only judgements made on the device and by the evaluator version of the trial's final
    evaluation (figures of two machines or versions never mix on one curve), and only where the
    evaluator's own hash of what it judged is the snapshot's (a file swapped in later counts for
    nothing). Several such judgements of one snapshot: the newest."""
    taken = snapshots.taken(r.get("snapshots"))
    if not taken or d is None:
        return []
    judged = snapshots.judgements(d)
    ev = r.get("evaluation") or {}
    device = (ev.get("device") or {}).get("name") or (r.get("environment") or {}).get("gpu") or "cpu"
    version = ev.get("evaluator_version")
    points = []
    for snap in taken:
        fits = [e for e in judged.get(snap["file"], [])
                if _dict(e["evaluation"].get("device")).get("name") == device
                and (version is None or e["evaluation"].get("evaluator_version") == version)
                and e["evaluation"].get("submission_sha256") == snap["sha256"] == _dict(e.get("snapshot")).get("sha256")]
        if not fits:
            continue
        e = max(fits, key=lambda e: str(e.get("judged_at") or ""))["evaluation"]
        points.append({"source": "snapshot", "turn": _num(snap.get("turn")), "tokens": _num(snap.get("tokens")),
                       "cost_usd": _num(snap.get("cost_usd")), "accepted": e.get("verdict") == "accepted",
                       "speedup": _num(e.get("geomean_speedup"))})
    return points


def _jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash: the rest still counts
        if isinstance(item, dict):
            out.append(item)
    return out


def transcript(path: Path) -> list[dict[str, Any]]:
    """A trial's messages; tool calls that are not objects are dropped."""
    out = []
    for m in _jsonl(path):
        m = dict(m, tool_calls=_dicts(m.get("tool_calls")))
        for c in m["tool_calls"]:
            c["arguments"] = _dict(c.get("arguments"))
        out.append(m)
    return out


def _spend_by_turn(path: Path) -> list[tuple[float, float]]:
    """Cumulative (tokens, dollars) after each model call."""
    tokens = cost = 0.0
    out = []
    for call in _jsonl(path):
        u = (call.get("response") or {}).get("usage") or {}
        tokens += _num(u.get("total_tokens"), 0.0)
        cost += _num(u.get("cost_usd"), 0.0)
        out.append((tokens, cost))
    return out


def _evaluate_results(transcript: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(turn, evaluator JSON) for each result of the agent's ``evaluate`` tool."""
    turn, calls, out = 0, {}, []
    for m in transcript:
        if m.get("role") == "assistant":
            turn += 1
            for c in m.get("tool_calls") or []:
                if isinstance(c, dict) and c.get("name") == "evaluate":
                    calls[c.get("id")] = turn
        elif m.get("role") == "tool" and m.get("tool_call_id") in calls:
            try:
                result = json.loads(m.get("content") or "")
            except ValueError:
                continue
            if isinstance(result, dict):
                out.append((calls[m["tool_call_id"]], result))
    return out


def trial_files(trial_dir: Path | str) -> dict[str, Any]:
    """What the report shows of one trial: transcript, final kernel, the evaluator's JSON."""
    d = Path(trial_dir)
    try:
        kernel = (d / "kernel.py").read_text(errors="replace")
    except OSError:
        kernel = None
    return {"transcript": transcript(d / "transcript.jsonl"), "kernel": kernel}
