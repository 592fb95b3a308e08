"""The study's report: ``text`` for the terminal; ``write`` for files (CSV and Markdown tables,
PNG plots, an offline HTML report with a page per trial)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis import tables

COUNTS = "trials: all of the arm; accepted/rejected/crashed/no_submission: outcomes; budget_out: ended by a budget"


def _fmt(df: pd.DataFrame) -> str:
    return df.to_string(index=False, float_format=lambda x: f"{x:.4g}")


def _rule(rejected_as: float | str) -> str:
    return "excluded (sensitivity view)" if rejected_as == "exclude" else f"counted as {float(rejected_as):g}x"


def notes(s: dict[str, Any]) -> list[str]:
    """Lines a reader must see before the numbers: skipped records, refused pairs, split arms."""
    lines = []
    if s["skipped"]:
        lines.append(f"skipped {len(s['skipped'])} record(s) that cannot be used:")
        lines += [f"  {where}: {why}" for where, why in s["skipped"]]
    lines += s["variants"]
    lines += tables.refusal_lines(s["refusals"])
    return lines


ARM_COLUMNS = ["timing", "arm", "model", "trials", "accepted", "rejected", "crashed", "no_submission", "budget_out",
               "geomean_speedup", "ci_low", "ci_high", "sol", "tokens", "cost_usd", "turns"]
RATIO_COLUMNS = ["timing", "ratio", "model", "pairs", "counted", "refused", "arm_not_accepted", "baseline_not_accepted",
                 "geomean_ratio", "ci_low", "ci_high", "wilcoxon_p", "wins", "ties", "losses"]


def text(path: Path | str, baseline: str | None = None, rejected_as: float | str = 1.0) -> str:
    s = tables.summary(path, baseline, rejected_as)
    if s["trials"].empty:
        return "\n".join([f"no trial records under {path}", *notes(s)])
    lines = [f"\nstudy records: {path}  ({len(s['trials'])} trials)", *notes(s)]
    if (s["trials"]["timing"] == "cpu-interpreted").any():
        lines.append("timing cpu-interpreted: Triton's CPU interpreter, not GPU figures; "
                     "speedups show the pipeline works, not how fast a kernel is")
    lines.append(f"\narms (geomean speedup vs the best library over operators, 95% t interval; "
                 f"trials not accepted {_rule(rejected_as)}; {COUNTS}):")
    lines.append(_fmt(s["arms"][ARM_COLUMNS]))
    if not s.get("ratios", pd.DataFrame()).empty:
        lines.append(f"\nmatched ratios (pairs share their match key and environment; trials not accepted "
                     f"{_rule(rejected_as)}; wins/ties/losses with a tie band of +-{tables.stats.TIE_BAND:.0%}):")
        lines.append(_fmt(s["ratios"][RATIO_COLUMNS]))
        if not s["planning"].empty:
            lines.append("\nplanning (this study as a pilot; two-sided alpha 0.05, power 0.8):")
            lines.append(_fmt(s["planning"]))
    elif baseline:
        lines.append(f"\nno {baseline} trials with the same match key yet: run that arm too to get a ratio")
    if not s["rejections"].empty:
        lines.append("\nrejected trials by evaluator check (a trial counts under each of its reasons):")
        lines.append(_fmt(s["rejections"]))
    return "\n".join(lines)
