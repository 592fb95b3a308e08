"""The study's statistics: one estimator for every mean and its interval, tests, power.

The estimator (for an arm's speedup and for a matched ratio alike): log values grouped by
operator; the estimate is exp(mean over operators of the per-operator mean), i.e. the geometric
mean over operators of per-operator geometric means over seeds. Its interval is Student's t on
that stratified mean (K operators, n_o seeds of operator o, s_o^2 their variance):

    se^2 = sum_o s_o^2 / n_o / K^2,   df = Welch-Satterthwaite: (sum_o s_o^2/n_o)^2 / sum_o (s_o^2/n_o)^2/(n_o - 1)

When some operator has a single seed (no s_o), the within-operator variance is pooled over the
operators that have several: se^2 = s_p^2 sum_o 1/n_o / K^2, df = N - K. The interval is NaN
when no operator has two seeds. Operators are the fixed strata (the study's scope); seeds are
the random draws.

Checked by simulation: a percentile bootstrap over seeds within operators, tried first, covered
the true ratio of simulated 3- to 10-seed studies in only 81-90% (it under-states the spread of small
samples); pooled degrees of freedom gave 92-94% at 3 seeds with operators of unequal spread;
this interval covers it in 94-97% (``tests/analysis/test_stats.py``,
``benchmarks/analysis_coverage.py``). The same variance drives the power calculation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

TIE_BAND = 0.05  # a pair within +-5% of 1.0x is a tie
FAST_P = (0.0, 1.0, 1.5, 2.0)  # KernelBench's thresholds


@dataclass(frozen=True)
class Estimate:
    estimate: float  # exp(mean over operators of per-operator mean log)
    ci_low: float
    ci_high: float
    n: int  # values (trials or pairs)
    operators: int
    df: float  # degrees of freedom of the interval
    sd: float  # within-operator standard deviation of the log values (root mean variance)
    se: float  # standard error of the mean log


def estimate(groups, logs, level: float = 0.95) -> Estimate:
    """The estimator above. ``groups``: the operator of each value; ``logs``: natural-log values.
    Non-finite values are dropped. The interval is NaN when no operator has two values."""
    g = np.asarray(groups)
    x = np.asarray(logs, dtype=float)
    keep = np.isfinite(x)
    g, x = g[keep], x[keep]
    if len(x) == 0:
        return Estimate(np.nan, np.nan, np.nan, 0, 0, 0, np.nan, np.nan)
    codes, inverse = np.unique(g, return_inverse=True)
    k = len(codes)
    n_o = np.bincount(inverse, minlength=k).astype(float)
    mean_o = np.bincount(inverse, weights=x, minlength=k) / n_o
    centre = float(mean_o.mean())
    df = len(x) - k
    if df <= 0:
        return Estimate(float(np.exp(centre)), np.nan, np.nan, len(x), k, 0, np.nan, np.nan)
    dev2 = np.bincount(inverse, weights=(x - mean_o[inverse]) ** 2, minlength=k)
    if (n_o >= 2).all():
        w = dev2 / (n_o - 1) / n_o  # s_o^2 / n_o
        se = float(np.sqrt(w.sum()) / k)
        df_eff = float(w.sum() ** 2 / ((w ** 2) / (n_o - 1)).sum()) if w.sum() > 0 else float(df)
        sd = float(np.sqrt((dev2 / (n_o - 1)).mean()))
    else:
        sd = float(np.sqrt(dev2.sum() / df))
        se = float(sd * np.sqrt((1.0 / n_o).sum()) / k)
        df_eff = float(df)
    t = stats.t.ppf(0.5 + level / 2, df_eff)
    return Estimate(float(np.exp(centre)), float(np.exp(centre - t * se)), float(np.exp(centre + t * se)),
                    len(x), k, df_eff, sd, se)


def estimate_many(x: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same estimator for many balanced studies at once: ``x`` is (studies, operators, seeds)
    of log values. Returns (estimate, low, high), each of shape (studies,). For simulations."""
    s, k, n = x.shape
    mean_o = x.mean(axis=2)
    centre = mean_o.mean(axis=1)
    w = x.var(axis=2, ddof=1) / n
    se = np.sqrt(w.sum(axis=1)) / k
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.where(w.sum(axis=1) > 0, w.sum(axis=1) ** 2 / ((w ** 2) / (n - 1)).sum(axis=1), k * (n - 1))
    t = stats.t.ppf(0.5 + level / 2, df)
    return np.exp(centre), np.exp(centre - t * se), np.exp(centre + t * se)


def wilcoxon(logs) -> float:
    """Two-sided p-value of the Wilcoxon signed-rank test that the log-ratios centre on 0
    (pairs at exactly 1.0x, e.g. both rejected, are dropped, as Wilcoxon's rule does).
    NaN with fewer than two non-zero pairs."""
    x = np.asarray(logs, dtype=float)
    x = x[np.isfinite(x) & (x != 0)]
    if len(x) < 2:
        return float("nan")
    return float(stats.wilcoxon(x).pvalue)


def win_tie_loss(logs, band: float = TIE_BAND) -> tuple[int, int, int]:
    """Pairs where the arm is faster than (1 + band) x, within it, slower than 1 / (1 + band) x."""
    x = np.asarray(logs, dtype=float)
    x = x[np.isfinite(x)]
    edge = np.log1p(band)
    return int((x > edge).sum()), int((np.abs(x) <= edge).sum()), int((x < -edge).sum())


def mde(sd: float, operators: int, seeds: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimum detectable effect, as a ratio (e.g. 1.05), of a two-sided paired t-test at
    ``alpha`` with ``power``, for ``operators`` x ``seeds`` pairs whose log-ratios spread by ``sd``
    within operators: exp((t_{1-alpha/2} + t_power) * se), se = sd / sqrt(operators * seeds)."""
    df = operators * (seeds - 1)
    if seeds < 2 or not np.isfinite(sd) or df < 1:
        return float("nan")
    se = sd / np.sqrt(operators * seeds)
    return float(np.exp((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * se))


def power_at(effect: float, sd: float, operators: int, seeds: int, alpha: float = 0.05) -> float:
    """Exact power (noncentral t) of that test against a true ratio ``effect``."""
    df = operators * (seeds - 1)
    if seeds < 2 or df < 1:
        return float("nan")
    nc = np.log(effect) / (sd / np.sqrt(operators * seeds))
    crit = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def seeds_needed(effect: float, sd: float, operators: int, alpha: float = 0.05, power: float = 0.8,
                 most: int = 10_000) -> int | None:
    """Fewest seeds per operator whose MDE is at most ``effect`` (a ratio, e.g. 1.05); None if
    more than ``most``."""
    if not np.isfinite(sd) or effect <= 1:
        return None
    if sd == 0:
        return 2
    for n in range(2, most + 1):
        if mde(sd, operators, n, alpha, power) <= effect:
            return n
    return None


def sol_score(speedup, q) -> np.ndarray:
    """SOL-ExecBench's score S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL)): 0.5 at the baseline's
    time, 1 at speed-of-light. From the speedup T_b / T_k and q = T_SOL / T_b (the baseline's
    fraction of speed-of-light): S = 1 / (1 + (1/speedup - q) / (1 - q))."""
    s = np.asarray(speedup, dtype=float)
    q = np.asarray(q, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / (1.0 + (1.0 / s - q) / (1.0 - q))
