"""Trial frames -> the study's tables: per arm, per operator, matched ratios, planning, and the
paper's comparisons (fast_p, SOL score, hidden shapes, cost, mechanism use, best-so-far), and
``summary``, every table of a study at once. The scoring rule (produced and fallback, one rule for
every trial) is in ``scoring``, the paper's other measures in ``measures``; both are re-exported
here.

Designs are never pooled: every table has a row per (timing, scope, shape set, arm, model), and
pairs form only within one (``DESIGN``). ``timing`` is cuda or cpu-interpreted (figures of the two
never mix); ``scope`` how the study chose the shapes (multi_shape, single_shape, smoke); ``shapes``
the judged shape set's name. A single_shape trial judges one shape of the set: a seed's shapes
are averaged first (mean of logs, as the evaluator averages a multi_shape trial's shapes), then
seeds within an operator, then operators (``stats.estimate``, with its two named intervals:
these operators, operators like these). Many arms against one baseline: Holm-adjusted p-values
per test across the arms of a design (``*_p_holm``), and ``family_lines`` says which survive.

Matched pairs share a design, study, model, operator, seed and shape, and then must agree on
their whole match key (``match_fields``), run-time key (``environment_key``) and the libraries
the judge timed (a library installed on both machines may load on one only); a candidate pair
that disagrees is refused, and ``refusals`` names the differing field. A trial of either arm left
without a partner is counted and named in its row (``unpaired``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ablate.analysis import frames, stats
from ablate.analysis.measures import (best_so_far, cost_table, fast_p_table, flagged_lines, footing_lines, hidden_table,  # noqa: F401
                               mechanism_table, rejection_table, sol_score_table)
from ablate.analysis.scoring import (DESIGN, GROUP, INTERVALS, TIE_BAND, columns, counts, estimate, groups, logs,  # noqa: F401
                              per_seed, score, seed_logs, win_tie_loss)

PAIR_ON = ["study", "model", "operator", "seed", "timing", "scope", "shapes", "shape"]
NO_PAIRS, BOTH = "no pairs", "no pair where both were accepted"  # why a ratio has no estimate


def trials(path: Path | str, evaluation: str = "latest") -> pd.DataFrame:
    """One row per readable trial record under ``path`` (see ``frames.load``)."""
    return frames.trial_frame(frames.load(path, evaluation)[0])


def arm_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per arm (and design): the count of every outcome, the correctness rate, and both scores'
    geomean over operators with their two intervals. ``operators_with_kernel``: operators where
    the arm produced at least one accepted kernel (the produced figure is over those)."""
    df = score(df)
    rows = []
    for (key, g), (_, u) in zip(groups(df, GROUP), groups(seed_logs(df, GROUP), GROUP)):  # the same keys, in order
        rows.append({**key, "trials": len(g), **counts(g), "operators": g["operator"].nunique(),
                     "operators_with_kernel": g.loc[g["speedup"].notna(), "operator"].nunique(),
                     **columns("speedup", estimate(u, column="speedup")),
                     **columns("fallback", estimate(u, column="fallback")),
                     "sol": frames._geomean(g["sol"]), "tokens": float(g["tokens"].mean()),
                     "cost_usd": float(g["cost_usd"].mean()), "turns": float(g["turns"].mean())})
    return pd.DataFrame(rows)


def operator_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, operator): correctness rate, both scores' geomean over seeds with the interval
    over seeds, speed-of-light fraction of accepted kernels, and whether its produced kernels
    beat the best library (geomean over accepted seeds above 1.0x)."""
    df = score(df)
    rows = []
    by = GROUP + ["operator"]
    for (key, g), (_, u) in zip(groups(df, by), groups(seed_logs(df, by), by)):
        produced, fallback = estimate(u, column="speedup"), estimate(u, column="fallback")
        rows.append({**key, "trials": len(g), "accepted": int((g["outcome"] == "accepted").sum()),
                     "correct_rate": float((g["outcome"] == "accepted").mean()),
                     "speedup": produced.estimate, "speedup_these_low": produced.these.low,
                     "speedup_these_high": produced.these.high, "speedup_these_why": produced.these.why,
                     "fallback": fallback.estimate, "sol": frames._geomean(g["sol"]),
                     "beats_library": bool(produced.estimate > 1)})
    return pd.DataFrame(rows)


def paper_table(df: pd.DataFrame, arms: pd.DataFrame | None = None, ops: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per arm, the figures the reproduced paper reports: the produced geomean speedup against the
    best library (over shapes, seeds, then operators) with its interval over these operators,
    the fraction of speed-of-light, the correctness rate, "beats the best library on k of n
    operators" (from produced kernels), and the fallback geomean beside them. ``arms``, ``ops``:
    this data's arm and operator tables, when already computed."""
    arms = arm_table(df) if arms is None else arms
    ops = operator_table(df) if ops is None else ops
    rows = []  # both tables have a row per GROUP, in the same order
    for a, (_, g) in zip(arms.to_dict("records"), groups(ops, GROUP)):
        rows.append({**{c: a[c] for c in GROUP}, "speedup": a["speedup"], "speedup_these_low": a["speedup_these_low"],
                     "speedup_these_high": a["speedup_these_high"], "speedup_these_why": a["speedup_these_why"],
                     "sol": a["sol"], "correct_rate": a["correct_rate"],
                     "beats_library": f"{int(g['beats_library'].sum())} of {len(g)}", "fallback": a["fallback"]})
    return pd.DataFrame(rows)


def pairs(df: pd.DataFrame, arm: str, baseline: str) -> tuple[pd.DataFrame, list[dict]]:
    """Matched (arm, baseline) trials of one design and the candidates refused. A pair carries
    ``log_ratio`` (of produced speedups: NaN unless both were accepted) and ``log_fallback``."""
    df = score(df)
    a, b = df[df["arm"] == arm], df[df["arm"] == baseline]
    m = a.merge(b, on=PAIR_ON, suffixes=("", "_base"))
    if m.empty:
        return m.assign(log_ratio=pd.Series(dtype=float), log_fallback=pd.Series(dtype=float)), []
    env = m["environment_key"].map(_canon) == m["environment_key_base"].map(_canon)
    libs = (m["libraries"] == m["libraries_base"]) | (m["libraries"] == "") | (m["libraries_base"] == "")  # "": untimed
    # the evaluations read must be of one kind: both original or both rescored, by one evaluator version
    judged = (((m["evaluation"] == "original") == (m["evaluation_base"] == "original"))
              & ((m["evaluator_version"] == m["evaluator_version_base"]) | m["evaluator_version"].isna()
                 | m["evaluator_version_base"].isna()))
    same = (m["match_key"] == m["match_key_base"]) & env & libs & judged
    good = m[same].copy()
    good["log_ratio"] = np.log(good["speedup"]) - np.log(good["speedup_base"])
    good["log_fallback"] = np.log(good["fallback"]) - np.log(good["fallback_base"])
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
    if (r["evaluation"] == "original") != (r["evaluation_base"] == "original"):
        return ("evaluation read (one side rescored: python -m ablate.rescore both, or --evaluation original)",
                r["evaluation"], r["evaluation_base"])
    if pd.notna(r["evaluator_version"]) and pd.notna(r["evaluator_version_base"]) \
            and r["evaluator_version"] != r["evaluator_version_base"]:
        return "evaluator_version of the evaluations read", r["evaluator_version"], r["evaluator_version_base"]
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


def matched(df: pd.DataFrame, baseline: str) -> list[tuple]:
    """(design, arm, trials of that design, pairs, refused) for every arm of every design against
    ``baseline``: computed once, shared by the ratio tables."""
    out = []
    for design, sub in groups(df, DESIGN):
        # every arm of this model gets a row in each design, so that trials of either side left
        # without a partner (an arm run at one scope or on one kind of machine only) are named
        same = df["model"].fillna("") == (design["model"] or "")
        for arm in sorted(set(df.loc[same, "arm"]) - {baseline}):
            out.append((design, arm, sub, *pairs(sub, arm, baseline)))
    return out


def _names(trials: pd.DataFrame, most: int = 6) -> str:
    """'rmsnorm s0, s1; softmax s3' for trials, by operator; shapes of one seed once."""
    seeds = trials.groupby("operator")["seed"].apply(lambda s: ", ".join(f"s{x}" for x in sorted(set(s))))
    parts = [f"{op} {s}" for op, s in seeds.items()]
    return "; ".join(parts[:most]) + (f"; and {len(parts) - most} more operators" if len(parts) > most else "")


def ratio_table(df: pd.DataFrame, baseline: str, band: float = TIE_BAND, paired: list | None = None) -> pd.DataFrame:
    """For every arm of every design against ``baseline``: the pairs; each side's correctness
    over them; the produced ratio (``ratio``: pairs where both were accepted) and the fallback
    ratio (every pair), each with both intervals, p-values and Holm-adjusted p-values across the
    design's arms; wins/ties/losses; the trials of either arm without a partner, counted and
    named; refused candidate pairs."""
    rows = []
    for design, arm, sub, p, refused in paired if paired is not None else matched(df, baseline):
        mine, theirs = sub[sub["arm"] == arm], sub[sub["arm"] == baseline]
        lone_arm = mine[~mine["trial_id"].isin(p["trial_id"])]
        lone_base = theirs[~theirs["trial_id"].isin(p["trial_id_base"] if not p.empty else [])]
        w, t, lo = win_tie_loss(p, band) if not p.empty else (0, 0, 0)
        unpaired = "; ".join(f"{name}: {_names(lone)}" for name, lone in ((arm, lone_arm), (baseline, lone_base)) if len(lone))
        rows.append({**design, "comparison": f"{arm} / {baseline}", "arm": arm, "baseline": baseline, "pairs": len(p),
                     "both_accepted": int(p["log_ratio"].notna().sum()) if not p.empty else 0,
                     "arm_correct": float(p["speedup"].notna().mean()) if not p.empty else np.nan,
                     "baseline_correct": float(p["speedup_base"].notna().mean()) if not p.empty else np.nan,
                     "operators": p["operator"].nunique() if not p.empty else 0,
                     "seeds": p["seed"].nunique() if not p.empty else 0,
                     **columns("ratio", estimate(per_seed(p, p["log_ratio"]), BOTH) if not p.empty else stats.estimate([], [], empty=NO_PAIRS)),
                     **columns("fallback_ratio", estimate(per_seed(p, p["log_fallback"])) if not p.empty else stats.estimate([], [], empty=NO_PAIRS)),
                     "wins": w, "ties": t, "losses": lo, "unpaired_arm": len(lone_arm), "unpaired_baseline": len(lone_base),
                     "unpaired": unpaired, "refused": len({r["trial_id"] for r in refused})})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    for prefix in ("ratio", "fallback_ratio"):
        for name in INTERVALS:
            col = f"{prefix}_{name}_p"
            out[f"{col}_holm"] = out.groupby(DESIGN, dropna=False)[col].transform(lambda p: stats.holm(p.to_numpy()))
    # the arms compared in the design (those with pairs): what Holm adjusts over
    out["family"] = (out["pairs"] > 0).groupby([out[c] for c in DESIGN], dropna=False).transform("sum").astype(int)
    return out


def family_lines(ratios: pd.DataFrame, alpha: float = 0.05) -> list[str]:
    """One line per design comparing more than one arm with its baseline: which comparisons stay
    significant at family-wise ``alpha`` after Holm's adjustment, for each score and interval."""
    lines = []
    if ratios is None or ratios.empty:
        return lines
    for design, g in groups(ratios[ratios["pairs"] > 0], DESIGN):
        if len(g) < 2:
            continue
        parts = []
        for prefix, score_name in (("fallback_ratio", "fallback"), ("ratio", "produced")):
            for name, label in (("these", "these operators"), ("like", "operators like these")):
                held = g.loc[g[f"{prefix}_{name}_p_holm"] < alpha, "arm"]
                parts.append(f"{score_name}, {label}: {', '.join(held) if len(held) else 'none'}")
        where = ", ".join(str(design[c]) for c in DESIGN)
        lines.append(f"{len(g)} arms against {g['baseline'].iloc[0]} ({where}): Holm-adjusted, family-wise {alpha:.0%}, "
                     f"differ from 1.0x: " + "; ".join(parts))
    return lines


def operator_ratio_table(df: pd.DataFrame, baseline: str, band: float = TIE_BAND, paired: list | None = None) -> pd.DataFrame:
    """The matched ratio per operator: both scores' geomean over its seeds with the paired t
    interval over them, and wins/ties/losses."""
    rows = []
    for design, arm, sub, p, _ in paired if paired is not None else matched(df, baseline):
        for op, g in p.groupby("operator", sort=True) if not p.empty else []:
            produced, fallback = estimate(per_seed(g, g["log_ratio"]), BOTH), estimate(per_seed(g, g["log_fallback"]))
            w, t, lo = win_tie_loss(g, band)
            rows.append({**design, "comparison": f"{arm} / {baseline}", "operator": op, "pairs": len(g),
                         "both_accepted": int(g["log_ratio"].notna().sum()), "ratio": produced.estimate,
                         "ratio_these_low": produced.these.low, "ratio_these_high": produced.these.high,
                         "ratio_these_why": produced.these.why, "fallback_ratio": fallback.estimate,
                         "fallback_ratio_these_low": fallback.these.low, "fallback_ratio_these_high": fallback.these.high,
                         "fallback_ratio_these_why": fallback.these.why, "wins": w, "ties": t, "losses": lo})
    return pd.DataFrame(rows)


def planning_table(df: pd.DataFrame, baseline: str, effect: float = 1.05, alpha: float = 0.05, power: float = 0.8,
                   paired: list | None = None) -> pd.DataFrame:
    """From this study as a pilot, per comparison and score: the spread of log-ratios within an
    operator (``sd_within``) and of the operators' true ratios (``sd_between``, by moments), the
    minimum detectable ratio of the "operators like these" test at this design, and the seeds per
    operator (at these operators) or the operators (at these seeds) a ratio of ``effect`` needs.
    ``why`` says what cannot be planned from this pilot."""
    rows = []
    for design, arm, sub, p, _ in paired if paired is not None else matched(df, baseline):
        if p.empty:
            continue
        for prefix, score_name in (("fallback", "fallback"), ("ratio", "produced")):
            units = per_seed(p, p["log_fallback" if prefix == "fallback" else "log_ratio"]).dropna()
            if units.empty:
                continue
            e = estimate(units)
            seeds = int(units.groupby(level="operator").size().median())
            why = ("one operator: the spread between operators is unknown" if e.operators < 2 else
                   "one seed per operator: the spread within an operator is unknown" if not np.isfinite(e.sd) else "")
            need_seeds = stats.seeds_needed(effect, e.sd, e.tau, e.operators, alpha, power)
            need_ops = stats.operators_needed(effect, e.sd, e.tau, seeds, alpha, power)
            if not why and need_seeds is None:
                why = (f"no seed count reaches {effect:g}x with {e.operators} operators: the spread between "
                       f"operators alone is too wide; more operators are needed")
            rows.append({**design, "comparison": f"{arm} / {baseline}", "score": score_name, "operators": e.operators,
                         "seeds": seeds, "sd_within": e.sd, "sd_between": e.tau,
                         "mde_ratio": stats.mde(e.sd, e.tau, e.operators, seeds, alpha, power),
                         f"seeds_for_{effect:g}x": need_seeds, f"operators_for_{effect:g}x": need_ops, "why": why})
    return pd.DataFrame(rows)


def design_lines(df: pd.DataFrame) -> list[str]:
    """A line when the study's trials mix scopes or shape sets: each has its own rows, never pooled."""
    designs = df[["scope", "shapes"]].drop_duplicates().sort_values(["scope", "shapes"])
    if len(designs) < 2:
        return []
    shown = ", ".join(f"{s} ({sh})" for s, sh in designs.itertuples(index=False))
    return [f"this study mixes {len(designs)} designs: {shown}; each has its own rows, never pooled"]


def summary(path: Path | str, baseline: str | None = None, activity: bool = False,
            evaluation: str = "latest") -> dict[str, Any]:
    """Every table of a study directory. ``baseline``: the arm ratios divide by (none, or an arm
    the study lacks: no ratio tables); ``activity``: also read transcripts (mechanism use,
    best-so-far); ``evaluation``: which of each trial's evaluations to read (frames.load)."""
    records, skipped = frames.load(path, evaluation)
    df = frames.trial_frame(records)
    out: dict[str, Any] = {"trials": df, "skipped": skipped, "variants": frames.arm_variants(df), "refusals": [],
                           "records": records, "baseline": baseline, "evaluation": evaluation, "path": path}
    if df.empty:
        return out
    shapes = frames.shape_frame(records)
    arms, ops = arm_table(df), operator_table(df)
    out.update(shapes=shapes, arms=arms, operators=ops, paper=paper_table(df, arms, ops),
               fast_p=fast_p_table(df), sol_score=sol_score_table(df, shapes), hidden=hidden_table(shapes, df),
               cost=cost_table(df), rejections=rejection_table(df), designs=design_lines(df))
    if baseline and baseline in set(df["arm"]):
        paired = matched(df, baseline)
        out["ratios"] = ratio_table(df, baseline, paired=paired)
        out["planning"] = planning_table(df, baseline, paired=paired)
        out["operator_ratios"] = operator_ratio_table(df, baseline, paired=paired)
        out["refusals"] = [r for *_, refused in paired for r in refused]
        out["family"] = family_lines(out["ratios"])
    out["flagged"] = flagged_lines(df)
    if activity:
        progress, use = frames.activity(records)
        out.update(progress=progress, mechanisms=mechanism_table(df, use), footing=footing_lines(progress, df, records, path),
                   **{f"best_by_{by}": best_so_far(progress, df, by) for by in ("turn", "tokens", "cost_usd")})
    return out
