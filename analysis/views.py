"""The tables as a reader reads them: numbers written for reading (``fmt``: significant digits,
never scientific notation, "—" or a short reason where there is no number) and a view of each
table (``view``): both scores of an arm or a comparison on two rows, each interval with its p-value
or why it is not computable, design columns that hold one value moved to a caption. The CSV
files keep the numbers as computed; the terminal, Markdown and HTML show these views.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ablate.analysis import scoring

DESIGN_COLUMNS = ["timing", "scope", "shapes", "model"]  # dropped from a view when one value throughout


# --- numbers for reading ---------------------------------------------------------------------

def fmt(x: Any, digits: int = 3) -> str:
    """A number for reading: ``digits`` significant digits in positional notation (0.00211,
    0.000089, 1.23), whole numbers from 1000 up with separators (342,362); "—" for none."""
    if x is None or isinstance(x, str):
        return x or "—"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(v):
        return "—"
    if v == int(v) and abs(v) < 1e15 or abs(v) >= 1000:
        return f"{v:,.0f}"
    return np.format_float_positional(v, precision=digits, unique=False, fractional=False, trim="-")


def fmt_x(x: Any) -> str:
    """A speedup or ratio: 1.23x, 0.00211x; "—" for none."""
    s = fmt(x)
    return s if s == "—" else f"{s}.0x" if s.isdigit() and len(s) < 4 else f"{s}x"


def fmt_interval(low: Any, high: Any, why: Any = "") -> str:
    if isinstance(why, str) and why:
        return f"not computable: {why}"
    if low is None or not np.isfinite(low):
        return "—"
    return f"[{fmt_x(low)}, {fmt_x(high)}]"


def fmt_p(p: Any, holm: Any = None, family: int = 1) -> str:
    """A p-value: 0.004, <0.001; with Holm's adjustment beside it when the family has several arms."""
    def one(v):
        return "—" if v is None or not np.isfinite(v) else "<0.001" if v < 0.001 else fmt(v, 2)
    return one(p) if family < 2 or holm is None or one(p) == "—" else f"{one(p)} (Holm {one(holm)})"


def fmt_rate(rate: Any, n: Any = None) -> str:
    if rate is None or not np.isfinite(rate):
        return "—"
    return f"{rate:.0%}" + (f" of {int(n)}" if n is not None else "")


def fmt_money(x: Any) -> str:
    return "—" if x is None or not np.isfinite(x) else f"${x:,.2f}" if x >= 0.01 or x == 0 else f"${fmt(x, 2)}"


def readable(df: pd.DataFrame) -> pd.DataFrame:
    """Every cell of a table as text for reading (``fmt``)."""
    return df.apply(lambda col: col.map(fmt)) if not df.empty else df


# --- views: the tables as a reader reads them ------------------------------------------------

def compact(view: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The view without the design columns that hold one value throughout, and a caption naming them."""
    same = [c for c in DESIGN_COLUMNS if c in view.columns and view[c].nunique(dropna=False) <= 1]
    caption = "; ".join(f"{c}: {fmt(view[c].iloc[0])}" for c in same) if len(view) else ""
    return view.drop(columns=same), caption


def _design(row: dict[str, Any]) -> dict[str, Any]:
    return {c: row.get(c) for c in DESIGN_COLUMNS}


def _outcomes(row: dict[str, Any]) -> str:
    parts = [f"{row[o]} {o.replace('_', ' ')}" for o in scoring.OUTCOMES if row.get(o)]
    if row.get("budget_out"):
        parts.append(f"{row['budget_out']} ended by a budget")
    return ", ".join(parts) or "—"


def arms_view(arms: pd.DataFrame) -> pd.DataFrame:
    """Two rows per arm, one per score, each with both intervals."""
    rows = []
    for a in arms.to_dict("records"):
        for score, prefix in (("produced", "speedup"), ("fallback", "fallback")):
            first = score == "produced"
            rows.append({**_design(a), "arm": a["arm"], "score": score,
                         "geomean vs best library": fmt_x(a[prefix]),
                         "these operators (95%)": fmt_interval(a[f"{prefix}_these_low"], a[f"{prefix}_these_high"], a[f"{prefix}_these_why"]),
                         "operators like these (95%)": fmt_interval(a[f"{prefix}_like_low"], a[f"{prefix}_like_high"], a[f"{prefix}_like_why"]),
                         "operators": (f"{a['operators_with_kernel']} of {a['operators']} with a kernel" if first
                                       else f"{a['operators']}"),
                         "correct": fmt_rate(a["correct_rate"], a["trials"]) if first else "",
                         "outcomes": _outcomes(a) if first else "",
                         "sol": fmt(a["sol"]) if first else "", "tokens": fmt(a["tokens"]) if first else "",
                         "cost": fmt_money(a["cost_usd"]) if first else "", "turns": fmt(a["turns"]) if first else ""})
    return pd.DataFrame(rows)


def unpaired_text(r: dict[str, Any]) -> str:
    text = r["unpaired"] or "none"
    return text + (f"; {r['refused']} refused (see the notes)" if r["refused"] else "")


def ratios_view(ratios: pd.DataFrame) -> pd.DataFrame:
    """Two rows per comparison, one per score: the ratio, both intervals with their p-values
    (Holm-adjusted beside them when the design compares several arms), and on the first row
    wins/ties/losses, each side's correctness and the trials without a partner."""
    rows = []
    for r in ratios.to_dict("records"):
        if not r["pairs"]:  # one row: nothing to estimate, only the trials without a partner
            rows.append({**_design(r), "comparison": r["comparison"], "score": "—", "pairs": 0, "counted": 0,
                         "ratio": "—", "these operators (95%)": "no pairs", "p": "", "operators like these (95%)": "no pairs",
                         "p (like these)": "", "wins/ties/losses": "", "correct (arm / baseline)": "",
                         "unpaired trials": unpaired_text(r)})
            continue
        for score, prefix in (("produced", "ratio"), ("fallback", "fallback_ratio")):
            first = score == "produced"
            rows.append({**_design(r), "comparison": r["comparison"], "score": score,
                         "pairs": r["pairs"] if first else "",
                         "counted": r["both_accepted"] if first else r["pairs"],
                         "ratio": fmt_x(r[prefix]),
                         "these operators (95%)": fmt_interval(r[f"{prefix}_these_low"], r[f"{prefix}_these_high"], r[f"{prefix}_these_why"]),
                         "p": fmt_p(r[f"{prefix}_these_p"], r[f"{prefix}_these_p_holm"], r["family"]),
                         "operators like these (95%)": fmt_interval(r[f"{prefix}_like_low"], r[f"{prefix}_like_high"], r[f"{prefix}_like_why"]),
                         "p (like these)": fmt_p(r[f"{prefix}_like_p"], r[f"{prefix}_like_p_holm"], r["family"]),
                         "wins/ties/losses": f"{r['wins']}/{r['ties']}/{r['losses']}" if first else "",
                         "correct (arm / baseline)": (f"{fmt_rate(r['arm_correct'])} / {fmt_rate(r['baseline_correct'])}"
                                                      if first else ""),
                         "unpaired trials": unpaired_text(r) if first else ""})
    return pd.DataFrame(rows)


def operator_ratios_view(t: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([{**_design(r), "comparison": r["comparison"], "operator": r["operator"], "pairs": r["pairs"],
                          "both accepted": r["both_accepted"], "produced ratio": fmt_x(r["ratio"]),
                          "over its seeds (95%)": fmt_interval(r["ratio_these_low"], r["ratio_these_high"], r["ratio_these_why"]),
                          "fallback ratio": fmt_x(r["fallback_ratio"]),
                          "over its seeds (95%) ": fmt_interval(r["fallback_ratio_these_low"], r["fallback_ratio_these_high"],
                                                                r["fallback_ratio_these_why"]),
                          "wins/ties/losses": f"{r['wins']}/{r['ties']}/{r['losses']}"} for r in t.to_dict("records")])


def operators_view(t: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([{**_design(r), "arm": r["arm"], "operator": r["operator"], "trials": r["trials"],
                          "correct": fmt_rate(r["correct_rate"]), "produced": fmt_x(r["speedup"]),
                          "over its seeds (95%)": fmt_interval(r["speedup_these_low"], r["speedup_these_high"], r["speedup_these_why"]),
                          "fallback": fmt_x(r["fallback"]), "sol": fmt(r["sol"]),
                          "beats the best library": fmt(r["beats_library"])} for r in t.to_dict("records")])


def paper_view(t: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([{**_design(r), "arm": r["arm"], "produced speedup": fmt_x(r["speedup"]),
                          "these operators (95%)": fmt_interval(r["speedup_these_low"], r["speedup_these_high"], r["speedup_these_why"]),
                          "speed-of-light fraction": fmt(r["sol"]), "correct": fmt_rate(r["correct_rate"]),
                          "beats the best library on": f"{r['beats_library']} operators",
                          "fallback speedup": fmt_x(r["fallback"])} for r in t.to_dict("records")])


def planning_view(t: pd.DataFrame) -> pd.DataFrame:
    effect = [c for c in t.columns if c.startswith("seeds_for_")]
    rows = []
    for r in t.to_dict("records"):
        row = {**_design(r), "comparison": r["comparison"], "score": r["score"], "operators": r["operators"],
               "seeds": r["seeds"], "sd within an operator": fmt(r["sd_within"]), "sd between operators": fmt(r["sd_between"]),
               "detectable ratio now": fmt_x(r["mde_ratio"])}
        for c in effect:
            row[c.replace("_", " ")] = fmt(r[c])
            row[c.replace("seeds_", "operators_").replace("_", " ")] = fmt(r[c.replace("seeds_", "operators_")])
        row["why not"] = r["why"] or ""
        rows.append(row)
    return pd.DataFrame(rows)


TABLES = [  # (key in summary, title, view; None: every number formatted for reading)
    ("ratios", "Matched ratios against the baseline", ratios_view),
    ("arms", "Arms: geomean speedup vs the best library, both scores, outcome counts", arms_view),
    ("paper", "Per arm: the paper's figures (from produced kernels)", paper_view),
    ("operator_ratios", "Matched ratios per operator", operator_ratios_view),
    ("planning", "Planning: spread, minimum detectable ratio, seeds or operators needed (operators like these)", planning_view),
    ("operators", "Per operator and arm", operators_view),
    ("fast_p", "fast_p (KernelBench; baseline: the best library)", None),
    ("sol_score", "SOL-ExecBench score (0.5 at the library, 1 at speed-of-light; produced, and with the fallback)", None),
    ("hidden", "Generalisation to hidden shapes", None),
    ("cost", "Cost per trial", None),
    ("mechanisms", "Mechanism use per trial", None),
    ("rejections", "Rejected trials by evaluator check", None),
]


def view(s: dict[str, Any], key: str) -> tuple[pd.DataFrame, str]:
    """The table ``key`` of a summary as a reader sees it, and its caption (the design columns
    that hold one value)."""
    make = dict((k, v) for k, _, v in TABLES).get(key)
    t = s[key]
    shown = make(t) if make else readable(t)
    return compact(shown)
