"""The study's plots (PNG, matplotlib): per-operator speedups with intervals per arm, a forest
plot of arm ratios, speed-of-light fraction per operator, best-so-far curves. Each function takes
a table from ``tables`` (one timing kind) and writes one file; it returns the path, or None when
the table is empty."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a head node or in CI
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

DPI = 110


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _plain(axis) -> None:
    """Plain numbers (0.9, 1.2) on a log axis, not powers of ten."""
    axis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.3g"))
    axis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.3g"))


def operator_speedups(ops: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    """Geomean speedup over seeds per operator and arm, with its 95% interval (log scale)."""
    if ops.empty:
        return None
    operators = sorted(ops["operator"].unique())
    arms = sorted(ops["arm"].unique())
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(operators) * max(1, len(arms) / 2) + 2), 4))
    width = 0.8 / len(arms)
    for i, arm in enumerate(arms):
        g = ops[ops["arm"] == arm].set_index("operator").reindex(operators)
        x = np.arange(len(operators)) + (i - (len(arms) - 1) / 2) * width
        y = g["geomean_speedup"].to_numpy(dtype=float)
        lo = np.where(np.isfinite(g["ci_low"]), y - g["ci_low"], 0)
        hi = np.where(np.isfinite(g["ci_high"]), g["ci_high"] - y, 0)
        ax.errorbar(x, y, yerr=[lo, hi], fmt="o", capsize=3, label=arm)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_yscale("log")
    _plain(ax.yaxis)
    ax.set_xticks(np.arange(len(operators)), operators, rotation=30, ha="right")
    ax.set_ylabel("speedup vs best library (geomean over seeds)")
    ax.set_title(title or "per-operator speedup, 95% interval")
    ax.legend(fontsize=8)
    return _save(fig, path)


def forest(ratios: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    """Each arm's matched ratio against the baseline with its 95% interval."""
    r = ratios[ratios["counted"] > 0] if not ratios.empty else ratios
    if r.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 1 + 0.45 * len(r)))
    y = np.arange(len(r))[::-1]
    est = r["geomean_ratio"].to_numpy(dtype=float)
    lo = np.nan_to_num(est - r["ci_low"].to_numpy(dtype=float))
    hi = np.nan_to_num(r["ci_high"].to_numpy(dtype=float) - est)
    ax.errorbar(est, y, xerr=[lo, hi], fmt="s", capsize=4, color="tab:blue")
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    _plain(ax.xaxis)
    ax.set_yticks(y, [f"{q} ({n} pairs)" for q, n in zip(r["ratio"], r["counted"])])
    ax.set_xlabel("ratio of geomean speedups (matched pairs), 95% interval")
    ax.set_title(title or "arm ratios")
    return _save(fig, path)


def sol_fraction(ops: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    """Fraction of speed-of-light of accepted kernels, per operator and arm."""
    if ops.empty or not ops["sol"].notna().any():
        return None
    table = ops.pivot_table(index="operator", columns="arm", values="sol")
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(table) + 2), 4))
    table.plot.bar(ax=ax, rot=30)
    ax.set_ylim(0, 1)
    ax.set_ylabel("fraction of speed-of-light (accepted kernels)")
    ax.set_title(title or "speed-of-light fraction")
    return _save(fig, path)


def best_so_far(curves: dict[str, pd.DataFrame], path: Path, title: str = "") -> Path | None:
    """Best accepted speedup so far against turns, tokens and dollars, one panel each."""
    curves = {by: c for by, c in curves.items() if not c.empty}
    if not curves:
        return None
    fig, axes = plt.subplots(1, len(curves), figsize=(4.5 * len(curves), 3.6), squeeze=False)
    for ax, (by, c) in zip(axes[0], curves.items()):
        for arm, g in c.groupby("arm"):
            ax.step(g[by], g["speedup"], where="post", label=arm)
        ax.set_xlabel({"turn": "turns", "tokens": "tokens", "cost_usd": "dollars"}.get(by, by))
        ax.set_ylabel("best speedup so far (geomean)")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title or "best so far at equal spend")
    return _save(fig, path)
