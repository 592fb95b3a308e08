"""The study's plots (PNG, matplotlib): a forest plot of the matched ratios (both scores, both
intervals, Holm's survivors marked), per-operator speedups of produced kernels, speed-of-light
fraction per operator, best-so-far curves. Each function takes a table from ``tables`` (one
timing kind) and writes one file; it returns the path, or None when there is nothing to draw.
Log axes carry a few plain tick labels (1x, 2x, 0.5x), never overlapping minor ones."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a head node or in CI
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ablate.analysis.views import fmt, fmt_x  # noqa: E402

DPI = 110
ALPHA = 0.05


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _log_axis(ax, which: str, values) -> None:
    """A log axis over ``values`` (and 1.0) with at most about six labelled ticks at 1-2-5 steps,
    or evenly spaced rounded ones over a narrow range; no minor labels."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x) and x > 0] + [1.0], dtype=float)
    lo, hi = v.min() / 1.15, v.max() * 1.15
    nice = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1) for m in (1, 2, 5)]
    marks = [t for t in nice if lo <= t <= hi]
    if len(marks) > 7:
        marks = [t for t in marks if math.isclose(t / 10.0 ** math.floor(math.log10(t) + 1e-9), 1.0)]
    if len(marks) < 3:  # a narrow range: five rounded steps, and 1.0x unless a step is already near it
        steps = sorted({float(f"{t:.2g}") for t in np.geomspace(lo, hi, 5)})
        gap = math.log(hi / lo) / 8
        marks = sorted([t for t in steps if abs(math.log(t)) >= gap] + [1.0]) if lo <= 1 <= hi else steps
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    (ax.set_xlim if which == "x" else ax.set_ylim)(lo, hi)
    axis.set_major_locator(ticker.FixedLocator(marks))
    axis.set_major_formatter(ticker.FuncFormatter(lambda x, _: fmt_x(x)))
    axis.set_minor_locator(ticker.NullLocator())


def _label(df: pd.DataFrame, name: str) -> pd.Series:
    """``name`` (an arm or a comparison), with its scope and shape set when the table holds several."""
    if df[["scope", "shapes"]].drop_duplicates().shape[0] > 1:
        return df[name] + " · " + df["scope"] + " " + df["shapes"]
    return df[name]


def forest(ratios: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    """Each comparison's produced and fallback ratios: the thick bar the interval over these
    operators, the thin one over operators like these; a filled marker where the ratio differs
    from 1.0x after Holm's adjustment across the design's arms (these operators), hollow elsewhere."""
    if ratios is None or ratios.empty or not ratios["pairs"].gt(0).any():
        return None
    r = ratios[ratios["pairs"] > 0].reset_index(drop=True)
    labels = _label(r, "comparison")
    rows = [(f"{lab}, {score}", r.loc[i], prefix) for i, lab in enumerate(labels)
            for score, prefix in (("produced", "ratio"), ("fallback", "fallback_ratio"))]
    fig, ax = plt.subplots(figsize=(8 + 0.05 * max(len(t) for t, *_ in rows), 1.4 + 0.42 * len(rows)))
    values = []
    for y, (_, row, prefix) in zip(range(len(rows))[::-1], rows):
        est = row[prefix]
        for name, lw in (("like", 1.2), ("these", 4.0)):
            lo, hi = row[f"{prefix}_{name}_low"], row[f"{prefix}_{name}_high"]
            if np.isfinite(lo) and np.isfinite(hi):
                ax.plot([lo, hi], [y, y], color="tab:blue", lw=lw, solid_capstyle="butt", alpha=0.55 if name == "like" else 0.9)
                values += [lo, hi]
        if np.isfinite(est):
            held = row[f"{prefix}_these_p_holm"] < ALPHA
            ax.plot([est], [y], marker="o", ms=8, color="tab:blue", mfc="tab:blue" if held else "white", mew=1.5)
            values.append(est)
        else:
            ax.text(1.0, y, "  no pair where both were accepted", va="center", fontsize=8, color="grey")
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    _log_axis(ax, "x", values)
    ax.set_yticks(range(len(rows))[::-1], [t for t, *_ in rows], fontsize=9)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("ratio of geomean speedups, matched pairs\n95%: thick over these operators, thin over operators like these")
    family = int(r["family"].max())
    ax.set_title((title or "matched ratios") + (f"\nfilled: differs from 1.0x after Holm over {family} arms (these operators)"
                                                  if family > 1 else "\nfilled: the interval over these operators excludes 1.0x"),
                 fontsize=10)
    return _save(fig, path)


def _bottom_labels(ax, labels) -> None:
    ax.set_xticks(np.arange(len(labels)), labels, rotation=30, ha="right", rotation_mode="anchor")


def operator_speedups(ops: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    """Geomean speedup of produced kernels over seeds, per operator and arm, with its interval
    over seeds (log scale); the legend gives each arm's correctness."""
    if ops.empty or not ops["speedup"].notna().any():
        return None
    ops = ops.assign(label=_label(ops, "arm"))
    operators = sorted(ops["operator"].unique())
    arms = sorted(ops["label"].unique())
    fig, ax = plt.subplots(figsize=(max(6.5, 0.9 * len(operators) * max(1, len(arms) / 2) + 3), 4.5))
    width = 0.8 / len(arms)
    values = []
    for i, arm in enumerate(arms):
        g = ops[ops["label"] == arm].set_index("operator").reindex(operators)
        x = np.arange(len(operators)) + (i - (len(arms) - 1) / 2) * width
        y = g["speedup"].to_numpy(dtype=float)
        lo = np.where(np.isfinite(g["speedup_these_low"]), y - g["speedup_these_low"], 0)
        hi = np.where(np.isfinite(g["speedup_these_high"]), g["speedup_these_high"] - y, 0)
        correct = f"{g['accepted'].sum():.0f} of {g['trials'].sum():.0f} correct"
        ax.errorbar(x, y, yerr=[lo, hi], fmt="o", capsize=3, label=f"{arm} ({correct})")
        values += list(y) + list(g["speedup_these_low"]) + list(g["speedup_these_high"])
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    _log_axis(ax, "y", values)
    _bottom_labels(ax, operators)
    ax.set_ylabel("speedup vs best library\n(geomean over seeds, 95%)")
    ax.set_title(title or "per-operator speedup of produced kernels", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the data, never over it
    return _save(fig, path)


def sol_fraction(ops: pd.DataFrame, path: Path, title: str = "") -> Path | None:
    """Fraction of speed-of-light of accepted kernels, per operator and arm."""
    if ops.empty or not ops["sol"].notna().any():
        return None
    table = ops.assign(label=_label(ops, "arm")).pivot_table(index="operator", columns="label", values="sol")
    fig, ax = plt.subplots(figsize=(max(6.5, 0.8 * len(table) + 3), 4.5))
    table.plot.bar(ax=ax)
    _bottom_labels(ax, list(table.index))
    ax.set_xlabel("")
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: fmt(x)))
    ax.set_ylabel("fraction of speed-of-light\n(accepted kernels)")
    ax.set_title(title or "speed-of-light fraction", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _save(fig, path)


SPEND = {"turn": "turns", "tokens": "tokens", "cost_usd": "dollars"}


def spend_panels(curves: dict[str, pd.DataFrame]) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """The best-so-far curves that get a panel, and the spends no trial recorded (all 0: a
    scripted model's dollars), named for the title instead of an empty panel."""
    curves = {by: c for by, c in curves.items() if not c.empty}
    missing = [{"cost_usd": "cost"}.get(by, SPEND.get(by, by)) for by, c in curves.items() if not (c[by] > 0).any()]
    return {by: c for by, c in curves.items() if (c[by] > 0).any()}, missing


def best_so_far(curves: dict[str, pd.DataFrame], path: Path, title: str = "") -> Path | None:
    """Against turns, tokens and dollars spent: above, the fallback score of the best kernel found
    so far (never below 1.0x, never falling); below, the share of trials with an accepted kernel
    by then. A spend no trial recorded (every cost 0) gets no panel; the title says so."""
    curves, missing = spend_panels(curves)
    if not curves:
        return None
    fig, axes = plt.subplots(2, len(curves), figsize=(4.8 * len(curves), 6.2), squeeze=False, sharex="col",
                             gridspec_kw={"height_ratios": [3, 2]})
    for col, (by, c) in enumerate(curves.items()):
        top, bottom = axes[0][col], axes[1][col]
        c = c.assign(label=_label(c, "arm"))
        for arm, g in c.groupby("label"):
            top.step(g[by], g["fallback"], where="post", label=arm)
            bottom.step(g[by], g["with_kernel"], where="post", label=arm)
        top.axhline(1.0, color="grey", lw=0.8, ls="--")
        _log_axis(top, "y", c["fallback"])
        top.set_ylabel("best so far, fallback score\n(geomean; 1x = the library)")
        bottom.set_ylim(-0.05, 1.05)
        bottom.yaxis.set_major_formatter(ticker.PercentFormatter(1.0))
        bottom.set_ylabel("trials with an\naccepted kernel")
        bottom.set_xlabel(SPEND.get(by, by))
        bottom.xaxis.set_major_locator(ticker.MaxNLocator(5))
        bottom.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: fmt(x)))
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle((title or "best so far at equal spend") + (f"\n(no {' or '.join(missing)} recorded)" if missing else ""),
                 fontsize=10)
    return _save(fig, path)
