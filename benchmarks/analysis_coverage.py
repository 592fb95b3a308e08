"""The analysis' intervals and tests on simulated studies with a known truth.

    python -m benchmarks.analysis_coverage --out DIR [--studies 1000]

1. Coverage of both 95% intervals (``analysis.stats``). Each simulated study draws K operators
   from a population: operator o's true log-ratio mu_o ~ N(0.1, tau) and its own spread within,
   log-uniform in [0.05, 0.4]; n seeds each. "These operators" should hold exp(mean_o mu_o), the
   true ratio over the K operators drawn; "operators like these" should hold exp(0.1), the
   population's. The table gives each interval's coverage of its own target, and how often the
   first holds the second's target (what reading it as a claim about operators in general gets).
2. The family-wise error rate with many arms: ten arms against one shared baseline, no effect
   anywhere (10 operators x 3 seeds): the share of studies where at least one arm's p < 0.05,
   unadjusted and Holm-adjusted (``stats.holm``), for each interval's test.
3. The scoring rule, through ``analysis.tables`` on simulated trial frames: an arm with no real
   effect that only fails more often (40% against 10%), every accepted kernel of both arms at
   0.6x the library. The old rule (a failure 1.0x, an accepted kernel its speedup) showed the
   failing arm ahead; the produced and fallback ratios must not.
Writes DIR/coverage.md.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.analysis import stats, tables

DESIGNS = [(10, 5, 0.2), (10, 3, 0.2), (10, 3, 0.05), (5, 3, 0.2), (3, 5, 0.2), (3, 3, 0.2), (2, 3, 0.2), (1, 10, 0.2)]
CENTRE = 0.1


def simulate(studies: int, k: int, n: int, tau: float, rng: np.random.Generator):
    """Log-ratios (studies, k, n), the true ratio over these operators, and the population's."""
    mu = rng.normal(CENTRE, tau, (studies, k))
    sd = np.exp(rng.uniform(np.log(0.05), np.log(0.4), (studies, k)))
    x = mu[..., None] + sd[..., None] * rng.normal(size=(studies, k, n))
    return x, np.exp(mu.mean(axis=1)), np.exp(CENTRE)


def covers(low, high, truth) -> float:
    return float(((low <= truth) & (truth <= high)).mean())


def coverage_rows(studies: int, rng: np.random.Generator) -> list[str]:
    rows = []
    for k, n, tau in DESIGNS:
        x, these_truth, general = simulate(studies, k, n, tau, rng)
        r = stats.estimate_many(x)
        like = f"{covers(r['like_low'], r['like_high'], general):.1%}" if k >= 2 else "not computable (one operator)"
        rows.append(f"| {k} | {n} | {tau} | {covers(r['these_low'], r['these_high'], these_truth):.1%} | {like} | "
                    f"{covers(r['these_low'], r['these_high'], general):.1%} |")
    return rows


def familywise(studies: int, rng: np.random.Generator, arms: int = 10, k: int = 10, n: int = 3) -> dict[str, tuple[float, float]]:
    """Share of no-effect studies with at least one arm at p < 0.05: (unadjusted, Holm), per interval."""
    mu = rng.normal(0.0, 0.2, (studies, 1, k, 1))  # each operator's speed, the same for every arm
    sd = np.exp(rng.uniform(np.log(0.05), np.log(0.4), (studies, 1, k, 1)))
    base = mu + sd * rng.normal(size=(studies, 1, k, n))
    arm = mu + sd * rng.normal(size=(studies, arms, k, n))
    logs = (arm - base).reshape(studies * arms, k, n)  # every arm divided by the one shared baseline
    r = stats.estimate_many(logs)
    out = {}
    for name in ("these", "like"):
        p = r[f"{name}_p"].reshape(studies, arms)
        out[name] = (float((p < 0.05).any(axis=1).mean()), float((stats.holm(p) < 0.05).any(axis=1).mean()))
    return out


def _frame(rng: np.random.Generator, k: int, n: int, fail: dict[str, float], speed: float) -> pd.DataFrame:
    """A trial frame (the columns ``tables`` reads) of one study: every accepted kernel at
    ``speed`` x the library, times N(0, 0.1) noise; arm a fails with chance ``fail[a]``."""
    rows = []
    for op in range(k):
        for seed in range(n):
            for arm, chance in fail.items():
                ok = rng.random() >= chance
                rows.append({"trial_id": f"o{op}-{arm}-s{seed}", "study": "sim", "arm": arm, "model": "m",
                             "operator": f"o{op}", "seed": seed, "timing": "cuda", "scope": "multi_shape",
                             "shapes": "eval", "shape": "", "outcome": "accepted" if ok else "rejected",
                             "speedup": speed * float(np.exp(rng.normal(0, 0.1))) if ok else np.nan,
                             "match_key": f"o{op}-s{seed}", "environment_key": None, "libraries": "", "key_fields": None,
                             "evaluation": "original", "evaluator_version": None,
                             "budget_exhausted": False})
    return pd.DataFrame(rows)


def failing_arm(studies: int, rng: np.random.Generator, k: int = 10, n: int = 3) -> dict[str, float]:
    """Through tables.ratio_table: means and shares of studies placing the failing arm ahead."""
    old, produced, fallback, produced_ahead, fallback_ahead, old_ahead = [], [], [], 0, 0, 0
    for _ in range(studies):
        df = _frame(rng, k, n, {"fails_more": 0.4, "goal_only": 0.1}, 0.6)
        r = tables.ratio_table(df, "goal_only").iloc[0]
        produced.append(r["ratio"])
        fallback.append(r["fallback_ratio"])
        produced_ahead += bool(r["ratio_these_low"] > 1)
        fallback_ahead += bool(r["fallback_ratio"] > 1 or r["fallback_ratio_these_low"] > 1)
        # the old rule, for comparison: a failure 1.0x, an accepted kernel its own speedup
        scored = df.assign(old=df["speedup"].fillna(1.0))
        wide = scored.pivot_table(index=["operator", "seed"], columns="arm", values="old")
        e = stats.estimate(wide.index.get_level_values("operator"), np.log(wide["fails_more"] / wide["goal_only"]))
        old.append(e.estimate)
        old_ahead += bool(e.these.low > 1)
    return {"old_mean": float(np.exp(np.mean(np.log(old)))), "old_ahead": old_ahead / studies,
            "produced_mean": float(np.exp(np.nanmean(np.log(produced)))), "produced_ahead": produced_ahead / studies,
            "fallback_max": float(np.nanmax(fallback)), "fallback_ahead": fallback_ahead / studies}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--studies", type=int, default=1000)
    p.add_argument("--scoring-studies", type=int, default=1000, help="studies for part 3 (each through the tables)")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    t0 = time.perf_counter()
    lines = [f"# The analysis' intervals and tests on simulated studies ({a.studies} per design)", "",
             "## 1. Coverage of the two 95% intervals, each of its own target", "",
             f"Operators' true log-ratios ~ N({CENTRE}, tau); each operator's seeds spread log-uniform in [0.05, 0.4].", "",
             "| operators | seeds | tau | these operators: covers the true ratio over these operators | operators like "
             "these: covers the population's ratio | these operators, read as a claim about operators in general |",
             "|---|---|---|---|---|---|", *coverage_rows(a.studies, rng)]
    fw = familywise(a.studies, rng)
    lines += ["", "## 2. Family-wise error with ten arms against one baseline, no effect anywhere", "",
              "10 operators x 3 seeds; the share of studies where at least one arm's p < 0.05.", "",
              "| test | unadjusted | Holm-adjusted |", "|---|---|---|",
              f"| these operators | {fw['these'][0]:.1%} | {fw['these'][1]:.1%} |",
              f"| operators like these | {fw['like'][0]:.1%} | {fw['like'][1]:.1%} |"]
    sc = failing_arm(a.scoring_studies, rng)
    lines += ["", f"## 3. An arm that only fails more often ({a.scoring_studies} studies through analysis.tables)", "",
              "No real effect: 40% of its trials fail against the baseline's 10%; every accepted kernel of either arm "
              "runs at 0.6x the library. 10 operators x 3 seeds.", "",
              "| rule | mean ratio (failing arm / baseline) | studies placing the failing arm ahead (interval above 1) |",
              "|---|---|---|",
              f"| old: a failure 1.0x, an accepted kernel its speedup | {sc['old_mean']:.3f}x | {sc['old_ahead']:.1%} |",
              f"| produced (pairs where both were accepted) | {sc['produced_mean']:.3f}x | {sc['produced_ahead']:.1%} |",
              f"| fallback max(speedup, 1) | at most {sc['fallback_max']:.3f}x | {sc['fallback_ahead']:.1%} |"]
    wall = time.perf_counter() - t0
    header = (f"<!-- {time.strftime('%Y-%m-%d')} on a 2-core CPU machine without GPU; command: python -m "
              f"benchmarks.analysis_coverage --out {a.out} --studies {a.studies}; wall {wall:.0f} s -->")
    (a.out / "coverage.md").write_text("\n".join([header, *lines]) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
