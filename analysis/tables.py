"""Trial frames -> the study's tables: per arm, per operator, matched ratios, and the paper's
comparisons (fast_p, SOL score, hidden shapes, cost, mechanism use, best-so-far).

Counting rule: every trial of an arm counts. An accepted trial scores its speedup against the
best library (the evaluator's geometric mean over shapes); any other trial (rejected, crashed,
no submission; whatever ended it, a budget included) scores ``rejected_as`` (default 1.0: the
user falls back to the best library), or is left out with ``"exclude"`` (the sensitivity view).
Tables show the counts of each outcome beside every mean. Geometric means go over seeds within
an operator, then over operators (``stats.estimate``). Figures of different timing kinds
(``cuda``, ``cpu-interpreted``: the kind of the study's device) are never mixed.

Matched pairs share a study, model, operator and seed, and then must agree on their whole match
key (``match_fields``), run-time key (``environment_key``) and the libraries the judge timed (a
library installed on both machines may load on one only); a candidate pair that disagrees is
refused, and ``refusals`` names the differing field.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ablate import snapshots
from analysis import frames, stats

OUTCOMES = ("accepted", "rejected", "crashed", "no_submission")
PAIR_ON = ["study", "model", "operator", "seed", "timing"]
GROUP = ["timing", "arm", "model"]


def trials(path: Path | str) -> pd.DataFrame:
    """One row per readable trial record under ``path`` (see ``frames.load``)."""
    return frames.trial_frame(frames.load(path)[0])


def score(df: pd.DataFrame, rejected_as: float | str = 1.0) -> pd.DataFrame:
    """Adds ``score``: the speedup of an accepted trial, else ``rejected_as`` (NaN: excluded)."""
    out = df.copy()
    accepted = (out["outcome"] == "accepted") & (out["speedup"] > 0)
    fallback = np.nan if rejected_as == "exclude" else float(rejected_as)
    out["score"] = np.where(accepted, out["speedup"], fallback)
    return out


def _counts(g: pd.DataFrame) -> dict[str, int]:
    c = {o: int((g["outcome"] == o).sum()) for o in OUTCOMES}
    c["budget_out"] = int(g["budget_exhausted"].sum())
    return c


def _estimate_row(e: stats.Estimate, name: str) -> dict[str, float]:
    return {name: e.estimate, "ci_low": e.ci_low, "ci_high": e.ci_high}


def arm_table(df: pd.DataFrame, rejected_as: float | str = 1.0) -> pd.DataFrame:
    """Per (timing, arm, model): the geomean speedup over operators with its 95% interval, and the
    count of every outcome."""
    df = score(df, rejected_as)
    rows = []
    for (timing, arm, model), g in df.groupby(GROUP, sort=True):
        e = stats.estimate(g["operator"], np.log(g["score"]))
        rows.append({"timing": timing, "arm": arm, "model": model, "trials": len(g), **_counts(g),
                     "counted": e.n, **_estimate_row(e, "geomean_speedup"),
                     "sol": frames._geomean(g["sol"]), "tokens": float(g["tokens"].mean()),
                     "cost_usd": float(g["cost_usd"].mean()), "turns": float(g["turns"].mean())})
    return pd.DataFrame(rows)


def operator_table(df: pd.DataFrame, rejected_as: float | str = 1.0) -> pd.DataFrame:
    """Per (timing, arm, model, operator): geomean speedup over seeds with its interval,
    correctness rate, speed-of-light fraction of accepted kernels, and whether it beats the best library."""
    df = score(df, rejected_as)
    rows = []
    for (timing, arm, model, op), g in df.groupby(GROUP + ["operator"], sort=True):
        e = stats.estimate(g["operator"], np.log(g["score"]))
        rows.append({"timing": timing, "arm": arm, "model": model, "operator": op, "trials": len(g),
                     "accepted": int((g["outcome"] == "accepted").sum()),
                     "correct_rate": float((g["outcome"] == "accepted").mean()),
                     **_estimate_row(e, "geomean_speedup"), "sol": frames._geomean(g["sol"]),
                     "beats_library": bool(e.estimate > 1) if np.isfinite(e.estimate) else False})
    return pd.DataFrame(rows)


def paper_table(df: pd.DataFrame, rejected_as: float | str = 1.0) -> pd.DataFrame:
    """Per arm, the figures the reproduced paper reports: geomean speedup against the best library
    (over shapes, then operators), fraction of speed-of-light, correctness rate, and "beats the
    best library on k of n operators"."""
    ops = operator_table(df, rejected_as)
    arms = arm_table(df, rejected_as)
    rows = []
    for (timing, arm, model), g in ops.groupby(GROUP, sort=True):
        a = arms[(arms["timing"] == timing) & (arms["arm"] == arm) & (arms["model"] == model)].iloc[0]
        rows.append({"timing": timing, "arm": arm, "model": model, "geomean_speedup": a["geomean_speedup"],
                     "ci_low": a["ci_low"], "ci_high": a["ci_high"], "sol": a["sol"],
                     "correct_rate": a["accepted"] / a["trials"],
                     "beats_library": f"{int(g['beats_library'].sum())} of {len(g)}"})
    return pd.DataFrame(rows)


def pairs(df: pd.DataFrame, arm: str, baseline: str, rejected_as: float | str = 1.0) -> tuple[pd.DataFrame, list[dict]]:
    """Matched (arm, baseline) trials and the candidates refused. A pair's ``log_ratio`` is
    log(score_arm / score_baseline); NaN when either side is excluded."""
    df = score(df, rejected_as)
    a, b = df[df["arm"] == arm], df[df["arm"] == baseline]
    m = a.merge(b, on=PAIR_ON, suffixes=("", "_base"))
    if m.empty:
        return m.assign(log_ratio=pd.Series(dtype=float)), []
    env = m["environment_key"].map(_canon) == m["environment_key_base"].map(_canon)
    libs = (m["libraries"] == m["libraries_base"]) | (m["libraries"] == "") | (m["libraries_base"] == "")  # "": untimed
    same = (m["match_key"] == m["match_key_base"]) & env & libs
    good = m[same].copy()
    good["log_ratio"] = np.log(good["score"]) - np.log(good["score_base"])
    refused = []
    paired_trials = set(good["trial_id"])
    for _, r in m[~same].iterrows():
        if r["trial_id"] in paired_trials:
            continue  # this trial has its exact match; another candidate differing is no refusal
        field, x, y = _difference(r)
        refused.append({"arm": arm, "baseline": baseline, "trial_id": r["trial_id"], "baseline_trial": r["trial_id_base"],
                        "field": field, "value": x, "baseline_value": y})
    return good, refused


def _canon(d: Any) -> str:
    return json.dumps(d, sort_keys=True, default=str) if isinstance(d, dict) else ""


def _difference(r: pd.Series) -> tuple[str, Any, Any]:
    if _canon(r["environment_key"]) != _canon(r["environment_key_base"]):
        ea, eb = r["environment_key"] or {}, r["environment_key_base"] or {}
        f = frames.first_difference(ea, eb)
        return f"environment.{f}", _get(ea, f), _get(eb, f)
    if r["libraries"] and r["libraries_base"] and r["libraries"] != r["libraries_base"]:
        return "libraries timed (one installed library did not load on one side?)", r["libraries"], r["libraries_base"]
    ka, kb = r["key_fields"], r["key_fields_base"]
    if isinstance(ka, dict) and isinstance(kb, dict):
        f = frames.first_difference(ka, kb)
        return f, _get(ka, f), _get(kb, f)
    return "match_key (a record without match_fields)", r["match_key"], r["match_key_base"]


def _get(d: Any, dotted: str) -> Any:
    for k in dotted.split("."):
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _short(v: Any) -> str:
    s = json.dumps(v, default=str, sort_keys=True)
    return s if len(s) <= 60 else s[:57] + "..."


def refusal_lines(refused: list[dict]) -> list[str]:
    """One line per (ratio, differing field): how many candidate pairs it refused, and an example."""
    by: dict[tuple, list[dict]] = {}
    for r in refused:
        by.setdefault((r["arm"], r["baseline"], r["field"]), []).append(r)
    return [f"{arm} / {base}: {len(rs)} candidate pair(s) refused: {field} differs "
            f"({_short(rs[0]['value'])} vs {_short(rs[0]['baseline_value'])})"
            for (arm, base, field), rs in sorted(by.items())]


def _arms_against(df: pd.DataFrame, baseline: str):
    for (timing, arm, model), _ in df[df["arm"] != baseline].groupby(GROUP, sort=True):
        sub = df[(df["timing"] == timing) & (df["model"] == model)]
        yield timing, arm, model, sub


def matched(df: pd.DataFrame, baseline: str, rejected_as: float | str = 1.0) -> list[tuple]:
    """(timing, arm, model, trials of that timing and model, pairs, refused) for every arm against
    ``baseline``: computed once, shared by the ratio tables."""
    return [(timing, arm, model, sub, *pairs(sub, arm, baseline, rejected_as))
            for timing, arm, model, sub in _arms_against(df, baseline)]


def ratio_table(df: pd.DataFrame, baseline: str, rejected_as: float | str = 1.0, band: float = stats.TIE_BAND,
                paired: list | None = None) -> pd.DataFrame:
    """For every arm against ``baseline``: the geomean over operators of per-operator matched
    log-ratios with its 95% interval, the outcome counts of both sides, the Wilcoxon signed-rank
    p-value, and win/tie/loss with a tie band of +-``band``."""
    rows = []
    for timing, arm, model, sub, p, refused in paired if paired is not None else matched(df, baseline, rejected_as):
        counted = p[np.isfinite(p["log_ratio"])] if not p.empty else p
        e = stats.estimate(counted["operator"], counted["log_ratio"]) if not p.empty else stats.estimate([], [])
        w, t, lo = stats.win_tie_loss(counted["log_ratio"], band) if not p.empty else (0, 0, 0)
        not_acc = (lambda col: int((p[col] != "accepted").sum())) if not p.empty else (lambda col: 0)
        refused_trials = len({r["trial_id"] for r in refused})
        unmatched = int((~sub[sub["arm"] == arm]["trial_id"].isin(p["trial_id"] if not p.empty else [])).sum()) - refused_trials
        rows.append({"timing": timing, "ratio": f"{arm} / {baseline}", "model": model, "pairs": len(p),
                     "counted": e.n, "refused": refused_trials, "unmatched": unmatched, "arm_not_accepted": not_acc("outcome"),
                     "baseline_not_accepted": not_acc("outcome_base"), **_estimate_row(e, "geomean_ratio"),
                     "wilcoxon_p": stats.wilcoxon(counted["log_ratio"]) if not p.empty else np.nan,
                     "wins": w, "ties": t, "losses": lo})
    return pd.DataFrame(rows)


def operator_ratio_table(df: pd.DataFrame, baseline: str, rejected_as: float | str = 1.0,
                         band: float = stats.TIE_BAND, paired: list | None = None) -> pd.DataFrame:
    """The matched ratio per operator: geomean over its seeds with the paired t interval, wins/ties/losses."""
    rows = []
    for timing, arm, model, sub, p, _ in paired if paired is not None else matched(df, baseline, rejected_as):
        for op, g in p.groupby("operator", sort=True) if not p.empty else []:
            x = g["log_ratio"][np.isfinite(g["log_ratio"])]
            e = stats.estimate([op] * len(x), x)
            w, t, lo = stats.win_tie_loss(x, band)
            rows.append({"timing": timing, "ratio": f"{arm} / {baseline}", "model": model, "operator": op,
                         "pairs": len(g), "counted": e.n, **_estimate_row(e, "geomean_ratio"),
                         "wins": w, "ties": t, "losses": lo})
    return pd.DataFrame(rows)


def planning_table(df: pd.DataFrame, baseline: str, rejected_as: float | str = 1.0, effect: float = 1.05,
                   alpha: float = 0.05, power: float = 0.8, paired: list | None = None) -> pd.DataFrame:
    """From this study as a pilot: the spread of paired log-ratios within operators, the minimum
    detectable ratio at its seeds (two-sided alpha, power), and the seeds per operator that a
    ratio of ``effect`` needs."""
    rows = []
    for timing, arm, model, sub, p, _ in paired if paired is not None else matched(df, baseline, rejected_as):
        p = p[np.isfinite(p["log_ratio"])] if not p.empty else p
        if p.empty:
            continue
        e = stats.estimate(p["operator"], p["log_ratio"])
        seeds = int(p.groupby("operator").size().median())
        rows.append({"timing": timing, "ratio": f"{arm} / {baseline}", "model": model, "operators": e.operators,
                     "seeds": seeds, "sd_log_ratio": e.sd, "mde_ratio": stats.mde(e.sd, e.operators, seeds, alpha, power),
                     f"seeds_for_{effect:g}x": stats.seeds_needed(effect, e.sd, e.operators, alpha, power)})
    return pd.DataFrame(rows)


def fast_p_table(df: pd.DataFrame, thresholds=stats.FAST_P) -> pd.DataFrame:
    """KernelBench's fast_p: the fraction of trials whose kernel is correct (accepted) and faster
    than p x the baseline, here the best library (KernelBench uses PyTorch eager). fast_0 is the
    correctness rate. Every trial is in the denominator, whatever ``rejected_as`` says."""
    rows = []
    for (timing, arm, model), g in df.groupby(GROUP, sort=True):
        ok = g["outcome"] == "accepted"
        rows.append({"timing": timing, "arm": arm, "model": model, "trials": len(g),
                     **{f"fast_{p:g}": float((ok & (g["speedup"] > p)).mean()) for p in thresholds}})
    return pd.DataFrame(rows)


def sol_score_table(df: pd.DataFrame, shapes: pd.DataFrame, rejected_as: float | str = 1.0) -> pd.DataFrame:
    """SOL-ExecBench's score S (0.5 at the best library's time, 1 at speed-of-light), the mean over
    shapes of a trial, then over its operator's trials, then over operators. A trial that is not
    accepted scores as ``rejected_as`` x the library (S = 0.5 at 1.0x); its q = T_SOL / T_b is the
    operator's median over accepted shapes."""
    ok = shapes[(shapes["verdict"] == "accepted") & (shapes["speedup"] > 0) & (shapes["sol"] > 0)].copy()
    ok["q"] = ok["sol"] / ok["speedup"]
    ok["S"] = stats.sol_score(ok["speedup"], ok["q"])
    per_trial = ok.groupby("trial_id")["S"].mean()
    q_op = ok.groupby("operator")["q"].median()
    fallback = np.nan if rejected_as == "exclude" else float(rejected_as)
    rows = []
    for (timing, arm, model), g in df.groupby(GROUP, sort=True):
        s = np.where(g["outcome"] == "accepted", g["trial_id"].map(per_trial),
                     stats.sol_score(fallback, g["operator"].map(q_op).to_numpy(dtype=float))
                     if fallback != 1.0 else 0.5)
        per_op = pd.Series(s, index=g.index).groupby(g["operator"]).mean()
        rows.append({"timing": timing, "arm": arm, "model": model, "trials": len(g),
                     "sol_score": float(per_op.mean()) if per_op.notna().any() else np.nan})
    return pd.DataFrame(rows)


def hidden_table(shapes: pd.DataFrame) -> pd.DataFrame:
    """Generalisation to hidden shapes, over trials judged on both public and hidden shapes:
    how often a kernel correct on every public shape is correct on every hidden one, and the
    speedup it keeps there (geomean hidden / geomean public, over kernels correct on both)."""
    s = shapes[shapes["role"].isin(["public", "hidden"])]
    if set(s["role"]) != {"public", "hidden"}:
        return pd.DataFrame(columns=GROUP + ["trials", "public_correct", "hidden_given_public", "speedup_kept"])
    s = s.assign(log_speedup=np.log(s["speedup"].where(s["speedup"] > 0)))
    per = s.groupby(["trial_id", "role"]).agg(correct=("correct", "all"), log_speedup=("log_speedup", "mean")).unstack("role")
    per.columns = [f"{what}_{role}" for what, role in per.columns]
    per = per.dropna(subset=["correct_public", "correct_hidden"])
    per = per.join(s.drop_duplicates("trial_id").set_index("trial_id")[GROUP])
    rows = []
    for (timing, arm, model), g in per.groupby(GROUP, sort=True):
        pub = g["correct_public"].astype(bool)
        both = g[pub & g["correct_hidden"].astype(bool)]
        kept = (both["log_speedup_hidden"] - both["log_speedup_public"]).dropna()
        rows.append({"timing": timing, "arm": arm, "model": model, "trials": len(g), "public_correct": int(pub.sum()),
                     "hidden_given_public": float(len(both) / pub.sum()) if pub.sum() else np.nan,
                     "speedup_kept": float(np.exp(kept.mean())) if len(kept) else np.nan})
    return pd.DataFrame(rows)


def cost_table(df: pd.DataFrame, rejected_as: float | str = 1.0) -> pd.DataFrame:
    """Mean spend per trial (tokens, dollars, agent steps, wall, tool and GPU seconds) and the
    speedup bought per dollar: (geomean speedup - 1) / mean dollars per trial."""
    arms = arm_table(df, rejected_as).set_index(GROUP)
    rows = []
    for key, g in df.groupby(GROUP, sort=True):
        cost = float(g["cost_usd"].mean())
        gain = arms.loc[key, "geomean_speedup"] - 1
        rows.append({**dict(zip(GROUP, key)), "trials": len(g), "tokens": float(g["tokens"].mean()), "cost_usd": cost,
                     "turns": float(g["turns"].mean()), "wall_s": float(g["wall_s"].mean()),
                     "tool_s": float(g["tool_s"].mean()), "gpu_s": float(g["gpu_s"].mean()),
                     "speedup_gain_per_usd": float(gain / cost) if cost > 0 else np.nan})
    return pd.DataFrame(rows)


def mechanism_table(df: pd.DataFrame, activity: pd.DataFrame) -> pd.DataFrame:
    """Mean use per trial of each mechanism, per arm: tool calls by tool (from the transcript),
    events by kind (``agent.events``) and the numbers a record's ``mechanisms`` section carries.
    Only what the records hold; an arm without a field has 0 calls of that tool, NaN otherwise."""
    if activity.empty:
        return pd.DataFrame(columns=GROUP)
    a = activity.merge(df[["trial_id"] + GROUP], on="trial_id")
    per_trial = a.pivot_table(index=["trial_id"] + GROUP, columns="what", values="count", aggfunc="sum")
    tools = [c for c in per_trial.columns if c.startswith("tool:")]
    per_trial[tools] = per_trial[tools].fillna(0)
    # every trial of the arm counts, also one that used nothing
    full = df[["trial_id"] + GROUP].set_index(["trial_id"] + GROUP)
    per_trial = full.join(per_trial, how="left")
    per_trial[tools] = per_trial[tools].fillna(0)
    out = per_trial.groupby(level=GROUP).mean().reset_index()
    return out


def best_so_far(progress: pd.DataFrame, df: pd.DataFrame, by: str = "turn", rejected_as: float | str = 1.0,
                points: int = 50) -> pd.DataFrame:
    """Per arm, the best accepted speedup found so far against ``by`` (turn, tokens or cost_usd)
    spent: at each spend x, each trial scores the best accepted result it had by then (the agent's
    evaluate-tool results on public shapes and the final judgement on eval shapes), else
    ``rejected_as``; a trial that ended earlier keeps its result. Geomean over seeds, then operators."""
    if progress.empty:
        return pd.DataFrame(columns=GROUP + [by, "speedup", "trials"])
    fallback = np.nan if rejected_as == "exclude" else float(rejected_as)
    pr = progress[progress["trial_id"].isin(df["trial_id"])].dropna(subset=[by])
    rows = []
    for (timing, arm, model), g in pr.groupby(GROUP, sort=True):
        top = g[by].max()
        grid = np.linspace(0, top, points) if top > 0 else np.array([0.0])
        ids, inverse = np.unique(g["trial_id"], return_inverse=True)
        values = np.where(g["accepted"] & (g["speedup"] > 0), g["speedup"], -np.inf)
        # each result counts from the first grid point at or past its spend, and on from there
        first = np.searchsorted(grid, g[by].to_numpy(dtype=float), side="left")
        best = np.full((len(ids), len(grid) + 1), -np.inf)
        np.maximum.at(best, (inverse, first), values)
        best = np.maximum.accumulate(best, axis=1)[:, :len(grid)]
        best = np.where(np.isfinite(best), best, fallback)
        ops = g.drop_duplicates("trial_id").set_index("trial_id").loc[ids, "operator"].to_numpy()
        for j, x in enumerate(grid):
            e = stats.estimate(ops, np.log(best[:, j]))
            rows.append({"timing": timing, "arm": arm, "model": model, by: float(x), "speedup": e.estimate, "trials": e.n})
    return pd.DataFrame(rows)


def footing_lines(progress: pd.DataFrame, df: pd.DataFrame, records: list[dict[str, Any]],
                  path: Path | str = "runs/<study>") -> list[str]:
    """One line per (timing, model) whose best-so-far curves are not at equal footing: some arms
    have trusted points during their trials (evaluate results, judged snapshots) and other arms
    none, so those score ``rejected_as`` until their end. Names the fix when snapshots wait to be judged."""
    if progress.empty or df.empty:
        return []
    during = set(progress.loc[progress["source"] != "final", "trial_id"])
    unjudged = {r["trial_id"] for r in records if snapshots.taken(r.get("snapshots"))} - during
    lines = []
    for (timing, model), g in df.groupby(["timing", "model"], sort=True, dropna=False):
        has = g.groupby("arm")["trial_id"].agg(lambda ids: bool(during & set(ids)))
        if has.all() or not has.any():
            continue
        without = sorted(has[~has].index)
        waiting = int(g[g["arm"].isin(without)]["trial_id"].isin(unjudged).sum())
        lines.append(f"best-so-far ({timing}, {model}): not at equal footing: {', '.join(sorted(has[has].index))} "
                     f"with trusted points during the trial, {', '.join(without)} with only the final judgement"
                     + (f"; {waiting} trial(s) of those have snapshots to judge: python -m ablate.rescore {path} --snapshots"
                        if waiting else ""))
    return lines


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


def flagged_lines(df: pd.DataFrame) -> list[str]:
    """One line per flag that accepted trials carry, with how many and which: their numbers count in
    every table, and these are the ones a reader should look at first."""
    accepted = df[(df["outcome"] == "accepted") & (df["flags"].fillna("") != "")]
    by_flag: dict[str, list[str]] = {}
    for _, r in accepted.iterrows():
        for f in str(r["flags"]).split(","):
            by_flag.setdefault(f, []).append(str(r["trial_id"]))
    lines = []
    for f, ids in sorted(by_flag.items()):
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        lines.append(f"flag {f}: {len(ids)} accepted trial(s) to look at before trusting their numbers ({shown})")
    return lines


def summary(path: Path | str, baseline: str | None = None, rejected_as: float | str = 1.0,
            activity: bool = False) -> dict[str, Any]:
    """Every table of a study directory. ``activity``: also read transcripts (mechanism use, best-so-far)."""
    records, skipped = frames.load(path)
    df = frames.trial_frame(records)
    out: dict[str, Any] = {"trials": df, "skipped": skipped, "variants": frames.arm_variants(df), "refusals": [],
                           "records": records}
    if df.empty:
        return out
    shapes = frames.shape_frame(records)
    out.update(shapes=shapes, arms=arm_table(df, rejected_as), operators=operator_table(df, rejected_as),
               paper=paper_table(df, rejected_as), fast_p=fast_p_table(df),
               sol_score=sol_score_table(df, shapes, rejected_as), hidden=hidden_table(shapes),
               cost=cost_table(df, rejected_as), rejections=rejection_table(df))
    if baseline and baseline in set(df["arm"]):
        paired = matched(df, baseline, rejected_as)
        out["ratios"] = ratio_table(df, baseline, rejected_as, paired=paired)
        out["planning"] = planning_table(df, baseline, rejected_as, paired=paired)
        out["operator_ratios"] = operator_ratio_table(df, baseline, rejected_as, paired=paired)
        out["refusals"] = [r for *_, refused in paired for r in refused]
    out["flagged"] = flagged_lines(df)
    if activity:
        progress, use = frames.activity(records)
        out.update(progress=progress, mechanisms=mechanism_table(df, use), footing=footing_lines(progress, df, records, path),
                   **{f"best_by_{by}": best_so_far(progress, df, by, rejected_as) for by in ("turn", "tokens", "cost_usd")})
    return out
