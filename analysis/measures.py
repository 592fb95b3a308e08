"""The paper's other measures, by arm (``scoring.GROUP``): fast_p, the SOL score, hidden shapes,
cost, mechanism use, best-so-far (and whether its curves stand at equal footing), the evaluator
checks that rejected trials, and the flags a reader should look at first."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ablate import snapshots
from ablate.analysis import stats
from ablate.analysis.scoring import DESIGN, GROUP, estimate, geomeans, groups, logs, per_seed, score


def fast_p_table(df: pd.DataFrame, thresholds=stats.FAST_P) -> pd.DataFrame:
    """KernelBench's fast_p: the fraction of trials whose kernel is correct (accepted) and faster
    than p x the baseline, here the best library (KernelBench uses PyTorch eager). fast_0 is the
    correctness rate. Every trial is in the denominator."""
    rows = []
    for key, g in groups(df, GROUP):
        ok = g["outcome"] == "accepted"
        rows.append({**key, "trials": len(g), **{f"fast_{p:g}": float((ok & (g["speedup"] > p)).mean()) for p in thresholds}})
    return pd.DataFrame(rows)


def sol_score_table(df: pd.DataFrame, shapes: pd.DataFrame) -> pd.DataFrame:
    """SOL-ExecBench's score S (0.5 at the best library's time, 1 at speed-of-light): the mean
    over a trial's shapes, then over its operator's trials, then over operators. By the scoring
    rule: ``sol_score`` over accepted trials only (produced), ``sol_score_fallback`` over every
    trial, each at least 0.5 (the library's), a trial without an accepted kernel 0.5."""
    ok = shapes[(shapes["verdict"] == "accepted") & (shapes["speedup"] > 0) & (shapes["sol"] > 0)].copy()
    ok["S"] = stats.sol_score(ok["speedup"], ok["sol"] / ok["speedup"])
    per_trial = ok.groupby("trial_id")["S"].mean()
    rows = []
    for key, g in groups(df, GROUP):
        s = g["trial_id"].map(per_trial).where(g["outcome"] == "accepted")
        fallback = np.fmax(s.to_numpy(dtype=float), 0.5)
        rows.append({**key, "trials": len(g), "sol_score": float(s.groupby(g["operator"]).mean().mean()),
                     "sol_score_fallback": float(pd.Series(fallback, index=g.index).groupby(g["operator"]).mean().mean())})
    return pd.DataFrame(rows)


def hidden_table(shapes: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
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
    per = per.join(df.set_index("trial_id")[GROUP])
    rows = []
    for key, g in groups(per, GROUP):
        pub = g["correct_public"].astype(bool)
        both = g[pub & g["correct_hidden"].astype(bool)]
        kept = (both["log_speedup_hidden"] - both["log_speedup_public"]).dropna()
        rows.append({**key, "trials": len(g), "public_correct": int(pub.sum()),
                     "hidden_given_public": float(len(both) / pub.sum()) if pub.sum() else np.nan,
                     "speedup_kept": float(np.exp(kept.mean())) if len(kept) else np.nan})
    return pd.DataFrame(rows)


def cost_table(df: pd.DataFrame) -> pd.DataFrame:
    """Mean spend per trial (tokens, dollars, agent steps, wall, tool and GPU seconds) and the
    fallback speedup bought per dollar: (fallback geomean - 1) / mean dollars per trial (NaN
    when no cost was recorded)."""
    rows = []
    for key, g in groups(score(df), GROUP):
        cost, fallback = float(g["cost_usd"].mean()), estimate(logs(g, "fallback")).estimate
        rows.append({**key, "trials": len(g), "tokens": float(g["tokens"].mean()), "cost_usd": cost,
                     "turns": float(g["turns"].mean()), "wall_s": float(g["wall_s"].mean()),
                     "tool_s": float(g["tool_s"].mean()), "gpu_s": float(g["gpu_s"].mean()),
                     "fallback_gain_per_usd": float((fallback - 1) / cost) if cost > 0 else np.nan})
    return pd.DataFrame(rows)


def mechanism_table(df: pd.DataFrame, activity: pd.DataFrame) -> pd.DataFrame:
    """Mean use per trial of each mechanism, per arm: tool calls by tool (from the transcript),
    events by kind (``agent.events``) and the numbers of each mechanism's use in the record
    (``agent.mechanisms``: counts, and the length of lists). Only what the records hold; an arm
    without a field has 0 calls of that tool, NaN otherwise."""
    if activity.empty:
        return pd.DataFrame(columns=GROUP)
    a = activity.merge(df[["trial_id"] + GROUP], on="trial_id")
    per_trial = a.pivot_table(index="trial_id", columns="what", values="count", aggfunc="sum")
    tools = [c for c in per_trial.columns if c.startswith("tool:")]
    # every trial of the arm counts, also one that used nothing
    per_trial = df[["trial_id"] + GROUP].set_index("trial_id").join(per_trial, how="left")
    per_trial[tools] = per_trial[tools].fillna(0)
    return per_trial.groupby(GROUP, dropna=False).mean(numeric_only=True).reset_index()


def best_so_far(progress: pd.DataFrame, df: pd.DataFrame, by: str = "turn", points: int = 50) -> pd.DataFrame:
    """Per arm, what was found by each spend x of ``by`` (turn, tokens or cost_usd): each trial's
    best accepted result by then (the agent's evaluate-tool results on public shapes, judged
    snapshots, the final judgement on eval shapes); a trial that ended earlier keeps its result.
    ``fallback``: the scoring rule's fallback, max(best, 1), 1.0 before any accepted result, so
    the curve never falls; ``speedup``: the geomean best over the trials with an accepted
    result by then (NaN before any); ``with_kernel``: the share of trials with one."""
    if progress.empty:
        return pd.DataFrame(columns=GROUP + [by, "fallback", "speedup", "with_kernel", "trials"])
    pr = progress[progress["trial_id"].isin(df["trial_id"])].dropna(subset=[by])
    pr = pr.merge(df[["trial_id"] + GROUP], on="trial_id", suffixes=("_progress", ""))
    # one grid per design, so that every arm's curve runs to the same spend
    pr["top"] = pr.groupby(DESIGN, dropna=False)[by].transform("max")
    rows = []
    for key, g in groups(pr, GROUP):
        top = g["top"].max()
        grid = np.linspace(0, top, points) if top > 0 else np.array([0.0])
        ids, inverse = np.unique(g["trial_id"], return_inverse=True)
        values = np.where(g["accepted"] & (g["speedup"] > 0), g["speedup"], -np.inf)
        # each result counts from the first grid point at or past its spend, and on from there
        first = np.searchsorted(grid, g[by].to_numpy(dtype=float), side="left")
        best = np.full((len(ids), len(grid) + 1), -np.inf)
        np.maximum.at(best, (inverse, first), values)
        best = np.maximum.accumulate(best, axis=1)[:, :len(grid)]
        found = np.isfinite(best)
        trial = g.drop_duplicates("trial_id").set_index("trial_id").loc[ids]
        with np.errstate(divide="ignore", invalid="ignore"):  # log of the NaN before a trial's first kernel
            produced = geomeans(per_seed(trial, np.log(np.where(found, best, np.nan))))
            fallback = geomeans(per_seed(trial, np.log(np.where(found, np.fmax(best, 1.0), 1.0))))
        rows += [{**key, by: float(x), "fallback": fallback[j], "speedup": produced[j],
                  "with_kernel": float(found[:, j].mean()), "trials": len(ids)} for j, x in enumerate(grid)]
    return pd.DataFrame(rows)


def footing_lines(progress: pd.DataFrame, df: pd.DataFrame, records: list[dict[str, Any]],
                  path: Path | str = "runs/<study>") -> list[str]:
    """One line per (timing, model) whose best-so-far curves are not at equal footing: some arms
    have trusted points during their trials (evaluate results, judged snapshots) and other arms
    none, so those have only their final judgement. Names the fix when snapshots wait to be judged."""
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
