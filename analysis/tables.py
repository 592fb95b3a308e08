"""Records -> pandas tables -> geometric-mean speedups and matched ratios with confidence intervals.

Geometric means are exp(mean(log r)): first over shapes within an operator (the evaluator's
``geomean_speedup`` per trial), then over operators. A rejected trial counts as ``rejected_as``
(default 1.0: the user falls back to the best library), or is dropped with "exclude"; either way
the count is reported. Figures with different timing kinds (cuda-events, cpu-interpreted) are
never mixed: every table is grouped by ``timing``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ablate.store import TrialRecord, read_records


def trials(path: Path | str) -> pd.DataFrame:
    """One row per trial record under ``path``."""
    rows = []
    for r in map(TrialRecord.as_row, read_records(path)):
        ev = r.get("evaluation") or {}
        usage = r.get("usage") or {}
        rows.append({
            "trial_id": r["trial_id"], "study": r["study"], "arm": r["arm"], "match_key": r["match_key"],
            "model": (r.get("model") or {}).get("id"), "operator": r["operator"], "seed": r["seed"],
            "verdict": ev.get("verdict"), "reasons": ",".join(ev.get("reasons") or []),
            "end_reason": r.get("end_reason"), "timing": ev.get("timing") or "none",
            "speedup": ev.get("geomean_speedup"),
            "sol": _geomean([s.get("sol_fraction") for s in ev.get("shapes", [])]),
            "tokens": usage.get("total_tokens", 0), "cost_usd": usage.get("cost_usd", 0.0),
            "turns": (r.get("agent") or {}).get("turns"), "dir": r.get("_dir"),
        })
    return pd.DataFrame(rows)


def shapes(path: Path | str) -> pd.DataFrame:
    """One row per (trial, shape)."""
    rows = []
    for r in map(TrialRecord.as_row, read_records(path)):
        ev = r.get("evaluation") or {}
        for s in ev.get("shapes", []):
            rows.append({
                "trial_id": r["trial_id"], "arm": r["arm"], "operator": r["operator"], "seed": r["seed"],
                "shape_id": s.get("shape_id"), "correct": s.get("correct"), "time_ms": (s.get("time_ms") or {}).get("median"),
                "best_baseline": s.get("best_baseline"), "speedup": s.get("speedup_vs_best"),
                "sol": s.get("sol_fraction"), "timing": ev.get("timing"),
            })
    return pd.DataFrame(rows)


def _geomean(values) -> float:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x) and x > 0], dtype=float)
    return float(np.exp(np.log(v).mean())) if len(v) else float("nan")


def scored(df: pd.DataFrame, rejected_as: float | str = 1.0) -> pd.DataFrame:
    """Adds ``score``: the trial's speedup, or what a rejected trial counts as (NaN = excluded)."""
    out = df.copy()
    accepted = (out["verdict"] == "accepted") & out["speedup"].notna()
    fallback = np.nan if rejected_as == "exclude" else float(rejected_as)
    out["score"] = np.where(accepted, out["speedup"], fallback)
    return out


def _ci(logs: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Bootstrap (percentile) CI of exp(mean(log)). NaN when fewer than two values."""
    logs = logs[np.isfinite(logs)]
    if len(logs) < 2:
        return float("nan"), float("nan")
    if np.allclose(logs, logs[0]):
        return float(np.exp(logs[0])), float(np.exp(logs[0]))
    res = stats.bootstrap((logs,), np.mean, confidence_level=level, n_resamples=4000, method="percentile",
                          random_state=np.random.default_rng(0))
    return float(np.exp(res.confidence_interval.low)), float(np.exp(res.confidence_interval.high))


def arm_table(df: pd.DataFrame, rejected_as: float | str = 1.0) -> pd.DataFrame:
    """Per (timing, arm, model): geomean speedup over operators (each a geomean over its seeds), CI over seeds."""
    df = scored(df, rejected_as)
    rows = []
    for (timing, arm, model), g in df.groupby(["timing", "arm", "model"], sort=True):
        # per seed: geomean over operators; the CI resamples seeds
        per_seed = g.groupby("seed")["score"].apply(lambda s: np.log(s.dropna()).mean() if s.notna().any() else np.nan)
        lo, hi = _ci(per_seed.to_numpy(dtype=float))
        per_op = g.groupby("operator")["score"].apply(lambda s: np.log(s.dropna()).mean() if s.notna().any() else np.nan)
        rows.append({
            "timing": timing, "arm": arm, "model": model, "trials": len(g),
            "accepted": int((g["verdict"] == "accepted").sum()), "rejected": int((g["verdict"] != "accepted").sum()),
            "geomean_speedup": float(np.exp(np.nanmean(per_op))) if per_op.notna().any() else float("nan"),
            "ci_low": lo, "ci_high": hi, "sol": _geomean(g["sol"]),
            "tokens": float(g["tokens"].mean()), "cost_usd": float(g["cost_usd"].sum()), "turns": float(g["turns"].mean()),
        })
    return pd.DataFrame(rows)


def ratio_table(df: pd.DataFrame, baseline: str, rejected_as: float | str = 1.0) -> pd.DataFrame:
    """For every arm against ``baseline``: the geomean of matched per-trial ratios (pairs share a match
    key: same model, operator, shapes, budget, seed), first within operators then over them, with a
    bootstrap CI over the pairs."""
    df = scored(df, rejected_as)
    base = df[df["arm"] == baseline].set_index(["timing", "match_key"])["score"]
    rows = []
    for (timing, arm, model), g in df[df["arm"] != baseline].groupby(["timing", "arm", "model"], sort=True):
        pairs = []
        for _, r in g.iterrows():
            b = base.get((timing, r["match_key"]))
            if b is not None and np.isfinite(b) and np.isfinite(r["score"]) and b > 0 and r["score"] > 0:
                pairs.append((r["operator"], np.log(r["score"] / b)))
        if not pairs:
            rows.append({"timing": timing, "ratio": f"{arm} / {baseline}", "model": model, "pairs": 0,
                         "geomean_ratio": float("nan"), "ci_low": float("nan"), "ci_high": float("nan")})
            continue
        p = pd.DataFrame(pairs, columns=["operator", "log_ratio"])
        per_op = p.groupby("operator")["log_ratio"].mean()
        lo, hi = _ci(p["log_ratio"].to_numpy())
        rows.append({"timing": timing, "ratio": f"{arm} / {baseline}", "model": model, "pairs": len(p),
                     "geomean_ratio": float(np.exp(per_op.mean())), "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def rejection_table(df: pd.DataFrame) -> pd.DataFrame:
    """How many trials each evaluator check rejected, per arm, so a reader sees the checks at
    work. A trial rejected for several reasons counts under each; one never judged (no
    evaluation in its record) counts as "not_evaluated"."""
    rows = []
    for arm, verdict, reasons in zip(df["arm"], df["verdict"], df["reasons"]):
        if verdict == "accepted":
            continue
        for reason in (reasons.split(",") if verdict and reasons else ["not_evaluated"]):
            rows.append((arm, reason))
    if not rows:
        return pd.DataFrame(columns=["arm", "reason", "trials"])
    counts = pd.DataFrame(rows, columns=["arm", "reason"]).value_counts().rename("trials").reset_index()
    return counts.sort_values(["arm", "trials", "reason"], ascending=[True, False, True], ignore_index=True)


def summary(path: Path | str, baseline: str | None = None, rejected_as: float | str = 1.0) -> dict[str, Any]:
    df = trials(path)
    if df.empty:
        return {"trials": df, "arms": pd.DataFrame(), "ratios": pd.DataFrame(), "rejections": pd.DataFrame()}
    arms = arm_table(df, rejected_as)
    ratios = ratio_table(df, baseline, rejected_as) if baseline and baseline in set(df["arm"]) else pd.DataFrame()
    return {"trials": df, "arms": arms, "ratios": ratios, "rejections": rejection_table(df)}
