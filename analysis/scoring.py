"""The scoring rule and the grouping every table shares: one place for each.

The scoring rule, one for every trial (``score``); both of its figures are in every table:
  produced  the speedup against the best library of the kernel the arm produced (the evaluator's
            geometric mean over the trial's shapes), for an accepted trial. A trial without an
            accepted kernel (rejected, crashed, no submission, whatever ended it) has none: it
            counts in the correctness rate shown beside every produced figure, and as a loss to
            a trial with an accepted kernel in every win/tie/loss count. Columns ``speedup``
            (an arm), ``ratio`` (a comparison).
  fallback  max(produced, 1) for every trial, 1.0 for one without an accepted kernel: what a user
            gets who keeps the best library whenever the kernel is wrong or slower. Columns
            ``fallback``, ``fallback_ratio``.
An arm without a correct kernel has no produced figure, and a fallback of 1.0 on every trial: it
never scores above an arm with correct kernels, at most level with one. "Beats the best
library on k of n operators" reads from produced figures.

Every table groups an arm's trials by ``GROUP`` (designs never pooled: see ``tables``); the
estimator's unit is a seed of an operator, its shapes averaged first (``per_seed``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ablate.analysis import stats

OUTCOMES = ("accepted", "rejected", "crashed", "no_submission")
DESIGN = ["timing", "scope", "shapes", "model"]  # a comparison never crosses these
GROUP = ["timing", "scope", "shapes", "arm", "model"]  # an arm's rows
UNIT = ["operator", "seed"]  # one value of the estimator: a seed of an operator (its shapes averaged)
TIE_BAND = 0.05  # a pair within +-5% of 1.0x is a tie
INTERVALS = ("these", "like")  # these operators; operators like these (stats.Estimate)

SCORING = ("one rule for every trial: produced = the speedup vs the best library of the accepted kernel "
           "(a trial without one has none and counts in the correctness rate, and as a loss in wins/ties/losses); "
           "fallback = max(produced, 1), 1.0x without an accepted kernel (the user keeps the library)")
INTERVAL_NAMES = ("95% intervals: 'these operators' (the operators studied; seeds random) and 'operators like "
                  "these' (operators a random effect: t on per-operator means, K-1 df); p: the t test of each, "
                  "Holm-adjusted across the arms of a design")


def score(df: pd.DataFrame) -> pd.DataFrame:
    """The scoring rule (module docstring): ``speedup`` of an accepted trial (NaN otherwise) and
    ``fallback`` = max(speedup, 1), 1.0 without an accepted kernel."""
    out = df.copy()
    accepted = (out["outcome"] == "accepted") & (out["speedup"] > 0)
    out["speedup"] = out["speedup"].where(accepted)
    out["fallback"] = np.fmax(out["speedup"].to_numpy(dtype=float), 1.0)
    return out


def per_seed(g: pd.DataFrame, logs) -> pd.Series | pd.DataFrame:
    """Mean of log values per (operator, seed): a seed's shapes averaged; NaN without any.
    ``logs``: a value per row of ``g``, or a matrix of them (a column each)."""
    values = np.asarray(logs, dtype=float)
    frame = pd.DataFrame(values, index=g.index) if values.ndim == 2 else pd.Series(values, index=g.index)
    return frame.groupby([g["operator"], g["seed"]]).mean()


def logs(g: pd.DataFrame, column: str) -> pd.Series:
    return per_seed(g, np.log(g[column].to_numpy(dtype=float)))


def seed_logs(df: pd.DataFrame, by: list[str], scores=("speedup", "fallback")) -> pd.DataFrame:
    """``per_seed`` for every group of ``by`` at once (one groupby for a whole table): a row per
    (by..., operator, seed) with the mean log of each score."""
    keys = list(dict.fromkeys([*by, *UNIT]))
    with np.errstate(divide="ignore"):
        values = np.log(df[list(scores)].astype(float))
    return values.groupby([df[k] for k in keys], dropna=False, sort=True).mean().reset_index()


def estimate(units: pd.Series | pd.DataFrame, empty: str = "no accepted kernel", column: str | None = None) -> stats.Estimate:
    """``stats.estimate`` of per-seed logs: a ``per_seed`` Series, or the ``column`` of a ``seed_logs`` frame."""
    if column is not None:
        return stats.estimate(units["operator"].to_numpy(), units[column].to_numpy(dtype=float), empty=empty)
    return stats.estimate(units.index.get_level_values("operator"), units.to_numpy(dtype=float), empty=empty)


def geomeans(units: pd.DataFrame) -> np.ndarray:
    """The estimator's value (``stats.estimate``) for many columns of ``per_seed`` at once:
    exp(mean over operators of the per-operator mean over seeds), NaN where a column has none."""
    return np.exp(units.groupby(level="operator").mean().mean().to_numpy(dtype=float))


def columns(prefix: str, e: stats.Estimate) -> dict[str, Any]:
    out: dict[str, Any] = {prefix: e.estimate}
    for name in INTERVALS:
        iv = getattr(e, name)
        out.update({f"{prefix}_{name}_low": iv.low, f"{prefix}_{name}_high": iv.high, f"{prefix}_{name}_p": iv.p,
                    f"{prefix}_{name}_why": iv.why})
    return out


def counts(g: pd.DataFrame) -> dict[str, Any]:
    c: dict[str, Any] = {o: int((g["outcome"] == o).sum()) for o in OUTCOMES}
    c["budget_out"] = int(g["budget_exhausted"].sum())
    c["correct_rate"] = c["accepted"] / len(g) if len(g) else np.nan
    return c


def groups(df: pd.DataFrame, by: list[str]):
    for key, g in df.groupby(by, sort=True, dropna=False):
        yield dict(zip(by, key)), g


def win_tie_loss(p: pd.DataFrame, band: float = TIE_BAND) -> tuple[int, int, int]:
    """Pairs the arm wins, ties, loses by the scoring rule: both accepted, by the produced ratio
    with a tie band of +-``band``; only one accepted, that side wins; neither, a tie."""
    a, b = p["speedup"].notna(), p["speedup_base"].notna()
    edge = np.log1p(band)
    wins = int(((a & b & (p["log_ratio"] > edge)) | (a & ~b)).sum())
    losses = int(((a & b & (p["log_ratio"] < -edge)) | (~a & b)).sum())
    return wins, len(p) - wins - losses, losses
