"""The study's statistics: one estimator for every mean, its two named intervals and their tests,
Holm's adjustment across arms, and the planning of a next study.

The estimator (an arm's speedup and a matched ratio alike): log values grouped by operator, one
value per seed (``tables`` averages a seed's shapes first); the estimate is exp(mean over
operators of the per-operator mean), the geometric mean over operators of per-operator geometric
means over seeds. Two intervals surround it, each answering its own question:

these operators (operators fixed, seeds random): "on the K operators studied". Student's t on the
    stratified mean, n_o seeds of operator o, s_o^2 their variance:
        se^2 = sum_o s_o^2 / n_o / K^2,
        df = Welch-Satterthwaite: (sum_o s_o^2/n_o)^2 / sum_o (s_o^2/n_o)^2/(n_o - 1).
    When some operator has a single seed, the within-operator variance is pooled over the
    operators that have several: se^2 = s_p^2 sum_o 1/n_o / K^2, df = N - K.
    Not computable when no operator has two seeds.
operators like these (operators a random effect): "on operators drawn like these ones". Student's
    t on the K per-operator means, K - 1 degrees of freedom: se^2 = var(mean_o) / K. The spread
    between operators enters whole, so more seeds alone cannot narrow it below what the
    operators' own differences allow. Not computable with fewer than two operators.

Either is not computable when its width is zero (every value alike: the data say nothing about
the spread, and a [1.0, 1.0] would claim certainty from no information). Each interval's p-value
is the two-sided t test of "the true value is 1.0x" on the same standard error and degrees of
freedom, so p < 0.05 exactly when the 95% interval excludes 1. Wilcoxon's signed-rank test is
not used: pooled over operators, it tests the median pair, not this estimate.

Checked by simulation (``benchmarks/analysis_coverage.py``, committed in
``benchmarks/results/analysis-cpu/coverage.md``; ``tests/analysis/test_stats.py``): each interval
covers its own target in 93-97% of simulated studies, while the first, read as a claim about
operators in general, covers that only in 59-74% (37% with one operator), where operators'
true ratios spread by 0.2 in log. A percentile bootstrap over seeds within operators, tried
first for the first interval, covered 81-90%.

Many arms against one baseline: ``holm`` adjusts each test's p-values across the arms (Holm's
step-down; the family-wise error rate stays at most alpha under any dependence between arms,
which share the baseline's trials).

Planning uses the random-effect variance, var(mean_o) = tau^2 + sigma^2 / n (tau: the spread of
the operators' true values, sigma: of seeds within an operator), and the second interval's
K - 1 degrees of freedom: with tau > 0 some effects need more operators, not more seeds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

FAST_P = (0.0, 1.0, 1.5, 2.0)  # KernelBench's thresholds
ZERO_WIDTH = 1e-12  # a standard error of log values below this is no spread at all


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    p: float  # two-sided t test that the true value is 1.0x
    why: str = ""  # empty when computable; else why not, in words a reader sees

    @staticmethod
    def none(why: str) -> "Interval":
        return Interval(np.nan, np.nan, np.nan, why)


@dataclass(frozen=True)
class Estimate:
    estimate: float  # exp(mean over operators of per-operator mean log)
    n: int  # values (seeds or pairs) counted
    operators: int
    these: Interval  # these operators
    like: Interval  # operators like these
    sd: float  # within-operator standard deviation of the log values (root mean variance)
    tau: float  # between-operator standard deviation of the true values (moments; >= 0)


def _t_interval(centre: float, se: float, df: float, level: float, zero_why: str) -> Interval:
    if not se > ZERO_WIDTH:
        return Interval.none(f"zero width: {zero_why}")
    t = stats.t.ppf(0.5 + level / 2, df)
    p = float(2 * stats.t.sf(abs(centre) / se, df))
    return Interval(float(np.exp(centre - t * se)), float(np.exp(centre + t * se)), p)


def estimate(groups, logs, level: float = 0.95, empty: str = "no values") -> Estimate:
    """The estimator above. ``groups``: the operator of each value; ``logs``: natural-log values.
    Non-finite values are dropped; ``empty``: why there is no estimate when none is left."""
    g = np.asarray(groups)
    x = np.asarray(logs, dtype=float)
    keep = np.isfinite(x)
    g, x = g[keep], x[keep]
    if len(x) == 0:
        return Estimate(np.nan, 0, 0, Interval.none(empty), Interval.none(empty), np.nan, np.nan)
    codes, inverse = np.unique(g, return_inverse=True)
    k = len(codes)
    n_o = np.bincount(inverse, minlength=k).astype(float)
    mean_o = np.bincount(inverse, weights=x, minlength=k) / n_o
    centre = float(mean_o.mean())
    dev2 = np.bincount(inverse, weights=(x - mean_o[inverse]) ** 2, minlength=k)
    df = len(x) - k
    if df <= 0:
        sd, within = np.nan, np.nan
        these = Interval.none("one seed per operator")
    else:
        if (n_o >= 2).all():
            w = dev2 / (n_o - 1) / n_o  # s_o^2 / n_o
            se = float(np.sqrt(w.sum()) / k)
            df_eff = float(w.sum() ** 2 / ((w ** 2) / (n_o - 1)).sum()) if w.sum() > 0 else float(df)
            sd, within = float(np.sqrt((dev2 / (n_o - 1)).mean())), float(w.mean())
        else:
            sd = float(np.sqrt(dev2.sum() / df))
            se = float(sd * np.sqrt((1.0 / n_o).sum()) / k)
            df_eff, within = float(df), float(sd ** 2 * (1.0 / n_o).mean())
        these = _t_interval(centre, se, df_eff, level, "every seed gives the same value")
    if k < 2:
        like, tau = Interval.none("one operator"), np.nan
    else:
        between = float(mean_o.var(ddof=1))
        like = _t_interval(centre, np.sqrt(between / k), k - 1, level, "every operator gives the same value")
        tau = float(np.sqrt(max(0.0, between - within))) if np.isfinite(within) else np.nan
    return Estimate(float(np.exp(centre)), len(x), k, these, like, sd, tau)


def estimate_many(x: np.ndarray, level: float = 0.95) -> dict[str, np.ndarray]:
    """The same estimator for many balanced studies at once: ``x`` is (studies, operators, seeds)
    of log values, at least two seeds. Returns arrays of shape (studies,): ``estimate``,
    ``these_low``, ``these_high``, ``these_p``, ``like_low``, ``like_high``, ``like_p`` (the
    last three NaN with one operator). For simulations."""
    s, k, n = x.shape
    mean_o = x.mean(axis=2)
    centre = mean_o.mean(axis=1)
    w = x.var(axis=2, ddof=1) / n
    out = {"estimate": np.exp(centre)}
    with np.errstate(invalid="ignore", divide="ignore"):
        se = np.sqrt(w.sum(axis=1)) / k
        df = np.where(w.sum(axis=1) > 0, w.sum(axis=1) ** 2 / ((w ** 2) / (n - 1)).sum(axis=1), k * (n - 1))
        rows = [("these", se, df)]
        if k >= 2:
            rows.append(("like", mean_o.std(axis=1, ddof=1) / np.sqrt(k), np.full(s, k - 1.0)))
        for name, se_, df_ in rows:
            t = stats.t.ppf(0.5 + level / 2, df_)
            out.update({f"{name}_low": np.exp(centre - t * se_), f"{name}_high": np.exp(centre + t * se_),
                        f"{name}_p": 2 * stats.t.sf(np.abs(centre) / se_, df_)})
    if k < 2:
        out.update({f"like_{f}": np.full(s, np.nan) for f in ("low", "high", "p")})
    return out


def holm(p) -> np.ndarray:
    """Holm's step-down adjustment along the last axis; NaN p-values (tests not computable) are
    left out of the family and stay NaN."""
    p = np.asarray(p, dtype=float)
    finite = np.isfinite(p)
    m = finite.sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(finite, p, np.inf), axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(p.shape[-1])) * ranked, axis=-1))
    out = np.empty_like(p)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return np.where(finite, out, np.nan)


def _se(sd: float, tau: float, operators, seeds):
    return np.sqrt((tau ** 2 + sd ** 2 / np.asarray(seeds, dtype=float)) / np.asarray(operators, dtype=float))


def mde(sd: float, tau: float, operators, seeds, alpha: float = 0.05, power: float = 0.8):
    """Minimum detectable effect, as a ratio (e.g. 1.05), of the two-sided test of the "operators
    like these" interval at ``alpha`` with ``power``: exp((t_{1-alpha/2} + t_power) * se),
    se^2 = (tau^2 + sd^2 / seeds) / operators, df = operators - 1. NaN with fewer than two
    operators or an unknown spread."""
    k = np.asarray(operators, dtype=float)
    with np.errstate(invalid="ignore"):
        df = np.where(k >= 2, k - 1, np.nan)
        out = np.exp((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * _se(sd, tau, k, seeds))
    return float(out) if out.ndim == 0 else out


def power_at(effect: float, sd: float, tau: float, operators: int, seeds: int, alpha: float = 0.05) -> float:
    """Exact power (noncentral t, operators - 1 df) of that test against a true ratio ``effect``."""
    if operators < 2:
        return float("nan")
    df = operators - 1
    nc = np.log(effect) / _se(sd, tau, operators, seeds)
    crit = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def seeds_needed(effect: float, sd: float, tau: float, operators: int, alpha: float = 0.05, power: float = 0.8,
                 most: int = 10_000) -> int | None:
    """Fewest seeds per operator (at least two) whose MDE is at most ``effect`` with ``operators``
    operators; None when no seed count up to ``most`` reaches it (with tau > 0, more operators
    are needed) or the spread is unknown."""
    if operators < 2 or not (np.isfinite(sd) and np.isfinite(tau)) or effect <= 1:
        return None
    n = np.arange(2, most + 1)
    ok = np.flatnonzero(mde(sd, tau, operators, n, alpha, power) <= effect)
    return int(n[ok[0]]) if len(ok) else None


def operators_needed(effect: float, sd: float, tau: float, seeds: int, alpha: float = 0.05, power: float = 0.8,
                     most: int = 10_000) -> int | None:
    """Fewest operators whose MDE at ``seeds`` seeds each is at most ``effect``; None beyond ``most``."""
    if seeds < 1 or not (np.isfinite(sd) and np.isfinite(tau)) or effect <= 1:
        return None
    k = np.arange(2, most + 1)
    ok = np.flatnonzero(mde(sd, tau, k, seeds, alpha, power) <= effect)
    return int(k[ok[0]]) if len(ok) else None


def sol_score(speedup, q) -> np.ndarray:
    """SOL-ExecBench's score S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL)): 0.5 at the baseline's
    time, 1 at speed-of-light. From the speedup T_b / T_k and q = T_SOL / T_b (the baseline's
    fraction of speed-of-light): S = 1 / (1 + (1/speedup - q) / (1 - q))."""
    s = np.asarray(speedup, dtype=float)
    q = np.asarray(q, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / (1.0 + (1.0 / s - q) / (1.0 - q))
