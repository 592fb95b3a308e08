"""A plain-text report of a study directory: a table per arm, the matched ratios, and how many
trials each evaluator check rejected."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.tables import summary


def _fmt(df: pd.DataFrame) -> str:
    return df.to_string(index=False, float_format=lambda x: f"{x:.4g}")


def text(path: Path | str, baseline: str | None = None, rejected_as: float | str = 1.0) -> str:
    s = summary(path, baseline, rejected_as)
    if s["trials"].empty:
        return f"no trial records under {path}"
    lines = [f"\nstudy records: {path}  ({len(s['trials'])} trials)"]
    if (s["trials"]["timing"] == "cpu-interpreted").any():
        lines.append("timing cpu-interpreted: Triton's CPU interpreter, not GPU figures; "
                     "speedups show the pipeline works, not how fast a kernel is")
    lines.append("\narms (geomean speedup vs the best library, 95% bootstrap CI over seeds):")
    lines.append(_fmt(s["arms"]))
    if not s["ratios"].empty:
        fallback = "excluded" if rejected_as == "exclude" else f"counted as {rejected_as}x"
        lines.append(f"\nmatched ratios (pairs share model, operator, shapes, budget and seed; rejected kernels {fallback}):")
        lines.append(_fmt(s["ratios"]))
    elif baseline:
        lines.append(f"\nno {baseline} trials with the same match key yet: run that arm too to get a ratio")
    if not s["rejections"].empty:
        lines.append("\nrejected trials by evaluator check (a trial counts under each of its reasons):")
        lines.append(_fmt(s["rejections"]))
    return "\n".join(lines)
