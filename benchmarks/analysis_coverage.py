"""Coverage of the ratio's 95% interval on simulated studies with a known true ratio.

    python -m benchmarks.analysis_coverage --out DIR [--studies 1000]

Each simulated study has K operators x n seeds of matched log-ratios: per operator a true
log-ratio ~ N(0.1, 0.2) and its own spread, log-uniform in [0.05, 0.4]; the true ratio is the
geometric mean over operators of the true per-operator ratios. Reports, per design, the share of
studies whose interval (``analysis.stats``) holds the true ratio, and for comparison the share a
percentile bootstrap over seeds within operators reaches. Writes DIR/coverage.md.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from analysis import stats

DESIGNS = [(10, 5), (10, 3), (3, 5), (3, 3), (1, 10), (2, 2)]


def simulate(studies: int, k: int, n: int, rng: np.random.Generator):
    mu = rng.normal(0.1, 0.2, (studies, k))
    sd = np.exp(rng.uniform(np.log(0.05), np.log(0.4), (studies, k)))
    return mu[..., None] + sd[..., None] * rng.normal(size=(studies, k, n)), np.exp(mu.mean(axis=1))


def bootstrap_coverage(x: np.ndarray, true: np.ndarray, rng: np.random.Generator, resamples: int = 1000) -> float:
    hits = 0
    for i in range(len(x)):
        k, n = x[i].shape
        idx = rng.integers(0, n, (resamples, k, n))
        means = np.take_along_axis(np.broadcast_to(x[i], (resamples, k, n)), idx, 2).mean(axis=(1, 2))
        lo, hi = np.exp(np.quantile(means, [0.025, 0.975]))
        hits += lo <= true[i] <= hi
    return hits / len(x)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--studies", type=int, default=1000)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    lines = [f"# Coverage of the 95% interval, {a.studies} simulated studies per design", "",
             "| operators | seeds | t interval (analysis.stats) | percentile bootstrap | seconds (t / bootstrap) |",
             "|---|---|---|---|---|"]
    for k, n in DESIGNS:
        x, true = simulate(a.studies, k, n, rng)
        t0 = time.perf_counter()
        _, lo, hi = stats.estimate_many(x)
        cov = float(((lo <= true) & (true <= hi)).mean())
        t1 = time.perf_counter()
        boot = bootstrap_coverage(x, true, rng)
        t2 = time.perf_counter()
        lines.append(f"| {k} | {n} | {cov:.1%} | {boot:.1%} | {t1 - t0:.3f} / {t2 - t1:.1f} |")
        print(lines[-1], flush=True)
    (a.out / "coverage.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
