"""The study's report: ``text`` for the terminal; ``write`` for files (CSV and Markdown tables,
PNG plots, an offline HTML report with a page per trial).

What a reader sees first: the title (the study; "mixes designs" when its trials do; "rescored"
when figures come from a rescoring), a headline sentence per comparison, which evaluation the
figures come from, the notes (skipped records, refused pairs, Holm's family-wise statement),
the scoring rule and the two intervals in words, then the tables. The CSV files keep every
number as computed; the text, Markdown and HTML show them for reading (``fmt``): significant
digits, never scientific notation, and "—" or a short reason where there is no number.
"""
from __future__ import annotations

import html
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import tables

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
    parts = [f"{row[o]} {o.replace('_', ' ')}" for o in tables.OUTCOMES if row.get(o)]
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


def _unpaired(r: dict[str, Any]) -> str:
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
                         "unpaired trials": _unpaired(r)})
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
                         "unpaired trials": _unpaired(r) if first else ""})
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


# --- the words around the tables -------------------------------------------------------------

def title(s: dict[str, Any]) -> str:
    df = s["trials"]
    parts = [f"Study {s['path']}"]
    if not df.empty:
        designs = df[["scope", "shapes"]].drop_duplicates()
        if len(designs) > 1:
            parts.append(f"mixes scopes ({', '.join(sorted(set(designs['scope'])))}) and shape sets, each reported apart"
                         if designs["scope"].nunique() > 1 else "mixes shape sets, each reported apart")
        if (df["evaluation"] != "original").any():
            parts.append("rescored")
    return " — ".join(parts)


def evaluation_line(s: dict[str, Any]) -> str:
    """Which evaluation the figures come from, and how many trials a rescoring changed."""
    df = s["trials"]
    if df.empty:
        return f"evaluation: {s['evaluation']}"
    rescored = df[df["evaluation"] != "original"]
    versions = ", ".join(sorted({str(v) for v in df["evaluator_version"].dropna()})) or "unknown"
    if rescored.empty:
        return f"evaluation: original for every trial (as judged when it ran; none rescored; evaluator version {versions})"
    devices = ", ".join(sorted({str((r.get("evaluation") or {}).get("device", {}).get("name") or "unknown")
                                for r in s["records"] if r.get("evaluation_source", "original") != "original"}))
    return (f"evaluation: RESCORED: {len(rescored)} of {len(df)} trials read from a rescoring (python -m ablate.rescore; "
            f"evaluator version {versions}, judged on {devices}), the rest as judged when they ran; asked for: "
            f"{s['evaluation']}; --evaluation original shows the figures the trials ran with")


def _ratio_sentence(r: dict[str, Any]) -> str:
    arm, base = r["arm"], r["baseline"]
    where = f"{r['scope']}, {r['shapes']} shapes, {r['timing']}; {r['operators']} operator(s) x {r['seeds']} seed(s)"
    if not r["pairs"]:
        return f"{arm} against {base} ({where}): no matched pairs yet ({_unpaired(r)})."
    text = (f"{arm} against {base} ({where}, {r['pairs']} pairs): correct kernels in {fmt_rate(r['arm_correct'])} vs "
            f"{fmt_rate(r['baseline_correct'])} of the pairs; ")
    if r["both_accepted"]:
        text += (f"where both were accepted, {arm}'s kernels ran {fmt_x(r['ratio'])} {base}'s (these operators "
                 f"{fmt_interval(r['ratio_these_low'], r['ratio_these_high'], r['ratio_these_why'])}); ")
    else:
        text += "no pair where both were accepted; "
    text += (f"with the user's fallback to the library, {fmt_x(r['fallback_ratio'])} "
             f"({fmt_interval(r['fallback_ratio_these_low'], r['fallback_ratio_these_high'], r['fallback_ratio_these_why'])}).")
    return text


def headline(s: dict[str, Any], most: int = 3) -> list[str]:
    """The sentences a reader needs first: per comparison (a few), else per arm."""
    df = s["trials"]
    if df.empty:
        return []
    ratios = s.get("ratios")
    lines = []
    if isinstance(ratios, pd.DataFrame) and not ratios.empty:
        rows = ratios[ratios["pairs"] > 0].to_dict("records") or ratios.to_dict("records")
        lines += [_ratio_sentence(r) for r in rows[:most]]
        if len(rows) > most:
            more = len(rows) - most
            lines.append(f"... and {more} more comparison{'s' if more > 1 else ''} against {rows[0]['baseline']} in the table below.")
    else:
        for a in s["arms"].to_dict("records")[:most]:
            lines.append(f"{a['arm']} ({a['scope']}, {a['shapes']} shapes, {a['timing']}): correct kernels in "
                         f"{fmt_rate(a['correct_rate'], a['trials'])} trials; produced kernels at {fmt_x(a['speedup'])} the "
                         f"best library over the {a['operators_with_kernel']} of {a['operators']} operator(s) with one; with "
                         f"the user's fallback {fmt_x(a['fallback'])}.")
        if s.get("baseline") and s["baseline"] not in set(df["arm"]):
            lines.append(f"No {s['baseline']} trials: run that arm too for a matched ratio.")
    if (df["timing"] == "cpu-interpreted").any():
        lines.append("Timings from Triton's CPU interpreter, not GPU figures: they show the pipeline works, "
                     "not how fast a kernel is.")
    return lines


def notes(s: dict[str, Any]) -> list[str]:
    """Lines a reader must see before the numbers: skipped records, designs, refused pairs, split
    arms, Holm's family-wise statement, unequal best-so-far footing, flagged trials."""
    lines = []
    if s["skipped"]:
        lines.append(f"skipped {len(s['skipped'])} record(s) that cannot be used:")
        lines += [f"  {where}: {why}" for where, why in s["skipped"]]
    lines += s.get("designs", [])
    lines += s["variants"]
    lines += tables.refusal_lines(s["refusals"])
    lines += s.get("family", [])
    lines += s.get("footing", [])
    lines += s.get("flagged", [])
    return lines


RULES = [f"Scoring, {tables.SCORING}.", f"{tables.INTERVAL_NAMES}.",
         f"wins/ties/losses: a tie within +-{tables.TIE_BAND:.0%}; pairs never cross a scope or shape set."]


def render(s: dict[str, Any]) -> str:
    """The terminal report of a summary (``tables.summary``)."""
    if s["trials"].empty:
        return "\n".join([f"no trial records under {s['path']}", *notes(s)])
    lines = [title(s), *headline(s), evaluation_line(s), ""]
    lines += [f"note: {line}" for line in notes(s)]
    lines += ["", *RULES]
    shown = ["ratios", "arms", "planning", "rejections"]
    for key, name, _ in TABLES:
        if key in shown and isinstance(s.get(key), pd.DataFrame) and not s[key].empty:
            t, caption = view(s, key)
            lines += ["", f"{name}" + (f" ({caption})" if caption else "") + ":", t.to_string(index=False)]
    return "\n".join(lines)


def text(path: Path | str, baseline: str | None = None, rejected_as: Any = None, evaluation: str = "latest") -> str:
    """The terminal report of a study directory. ``rejected_as`` is read no more: every table
    shows both scores of the one rule (``tables.SCORING``); a value other than 1.0 says so."""
    out = render(tables.summary(path, baseline, evaluation=evaluation))
    if rejected_as not in (None, 1.0, 1, "1.0"):
        out = (f"note: rejected_as={rejected_as!r} is no longer read: every table shows the produced score (failures "
               f"left out, counted in the correctness rate) and the fallback score (failures at 1.0x)\n") + out
    return out


# ---------------------------------------------------------------------------------------------
# Files: tables (CSV, Markdown), plots (PNG), an offline HTML report with a page per trial.

def _progress(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def write(path: Path | str, out: Path | str, baseline: str | None = None, rejected_as: Any = None,
          quiet: bool = False, evaluation: str = "latest") -> Path:
    """Writes OUT/tables/*.csv, OUT/tables.md, OUT/plots/*.png, OUT/index.html and
    OUT/trials/<trial>.html; returns OUT/index.html. ``rejected_as`` is read no more (see ``text``)."""
    _progress(f"analysis: reading records under {path}", quiet)
    return write_summary(tables.summary(path, baseline, activity=True, evaluation=evaluation), out, quiet)


def write_summary(s: dict[str, Any], out: Path | str, quiet: bool = False) -> Path:
    """``write`` for a summary already computed (with ``activity=True``)."""
    from analysis import frames, plots

    out = Path(out)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    df = s["trials"]
    present = [(k, t) for k, t, _ in TABLES if isinstance(s.get(k), pd.DataFrame) and not s[k].empty]
    md = [f"# {title(s)}", "", *headline(s), "", evaluation_line(s), ""]
    md += [f"- {line}" for line in notes(s)]
    md += ["", *[f"- {rule}" for rule in RULES]]
    for key, name in present:
        s[key].to_csv(out / "tables" / f"{key}.csv", index=False)
        t, caption = view(s, key)
        md += ["", f"## {name}", ""] + ([f"_{caption}_", ""] if caption else []) + [t.to_markdown(index=False, disable_numparse=True)]
    if not df.empty:
        df.drop(columns=["key_fields", "environment_key", "harness"]).to_csv(out / "tables" / "trials.csv", index=False)
    (out / "tables.md").write_text("\n".join(md) + "\n")
    _progress(f"analysis: {len(present)} tables written to {out / 'tables'}", quiet)
    images = []
    for timing in sorted(df["timing"].unique()) if not df.empty else []:
        one = lambda t: t[t["timing"] == timing] if isinstance(t, pd.DataFrame) and not t.empty else pd.DataFrame()  # noqa: E731
        suffix = f" ({timing})"
        footing = any(line.startswith(f"best-so-far ({timing},") for line in s.get("footing", []))
        made = [
            plots.forest(one(s.get("ratios")), out / "plots" / f"ratios-{timing}.png", "matched ratios" + suffix),
            plots.operator_speedups(one(s["operators"]), out / "plots" / f"operators-{timing}.png",
                                    "per-operator speedup of produced kernels" + suffix),
            plots.sol_fraction(one(s["operators"]), out / "plots" / f"sol-{timing}.png", "speed-of-light fraction" + suffix),
            plots.best_so_far({by: one(s[f"best_by_{by}"]) for by in ("turn", "tokens", "cost_usd")},
                              out / "plots" / f"best-so-far-{timing}.png",
                              ("best so far, NOT at equal footing (see the notes)" if footing
                               else "best so far at equal spend") + suffix),
        ]
        images += [p for p in made if p]
    _progress(f"analysis: {len(images)} plots written to {out / 'plots'}", quiet)
    (out / "trials").mkdir(exist_ok=True)
    records = {r["trial_id"]: r for r in s["records"]}
    for i, (_, row) in enumerate(df.iterrows(), 1):
        page = _trial_page(row, records.get(row["trial_id"], {}), frames.trial_files(row["dir"]) if row["dir"] else {})
        (out / "trials" / f"{_file_name(row['trial_id'])}.html").write_text(page)
        if i % 1000 == 0 or i == len(df):
            _progress(f"analysis: trial pages {i}/{len(df)}", quiet)
    index = out / "index.html"
    index.write_text(_index_page(s, present, images, out))
    _progress(f"analysis: report {index}", quiet)
    return index


def _file_name(trial_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in str(trial_id))


CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
.wide{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#eef}td:first-child,th:first-child{text-align:left}.note{background:#fff4d6;padding:4px 8px;margin:2px 0}
#headline{font-size:16px;background:#eef6ee;padding:8px 12px;border-left:4px solid #4a7}.caption{color:#555;font-size:13px}
.rescored{color:#a00;font-weight:bold}.rules{font-size:13px;color:#333}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}
.msg{border-left:4px solid #ccc;padding:2px 8px;margin:6px 0}.user{border-color:#4a7}.assistant{border-color:#47c}
.tool{border-color:#c84}.error{background:#fee}.accepted{color:#070}.rejected{color:#a00}"""


def _html(page_title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(page_title)}</title>"
            f"<style>{CSS}</style></head><body>{body}</body></html>")


def _table_html(df: pd.DataFrame, **kw) -> str:
    return "<div class='wide'>" + df.to_html(index=False, na_rep="—", border=0, **kw) + "</div>"


def _cell(v: Any) -> str:
    if isinstance(v, (dict, list)):
        s = json.dumps(v, default=str)
        return html.escape(s if len(s) <= 200 else s[:197] + "...")
    return html.escape(fmt(v) if not isinstance(v, str) else v)


def _rows_html(rows: list[dict[str, Any]], table_id: str = "") -> str:
    """A small table without pandas (one per trial page: thousands of pages); the columns are the
    union of the rows' keys, in order of first appearance."""
    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(k))}</td>" for k in columns) + "</tr>" for r in rows)
    ident = f" id='{table_id}'" if table_id else ""
    return f"<div class='wide'><table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _index_page(s: dict[str, Any], present, images, out: Path) -> str:
    df = s["trials"]
    page_title = title(s)
    parts = [f"<h1>{html.escape(page_title)}</h1>"]
    if not df.empty:
        parts.append("<div id='headline'>" + "".join(f"<p>{html.escape(line)}</p>" for line in headline(s)) + "</div>")
    line = evaluation_line(s)
    parts.append(f"<p id='evaluation' class='{'rescored' if 'RESCORED' in line else ''}'>{html.escape(line)}</p>")
    parts.append(f"<p id='summary'>{len(df)} trials.</p>")
    parts += [f"<div class='note'>{html.escape(line)}</div>" for line in notes(s)]
    parts.append("<div class='rules'>" + "".join(f"<p>{html.escape(rule)}</p>" for rule in RULES) + "</div>")
    for key, name in present:
        t, caption = view(s, key)
        parts.append(f"<h2 id='{key}'>{html.escape(name)}</h2>"
                     + (f"<p class='caption'>{html.escape(caption)}</p>" if caption else "")
                     + _table_html(t, table_id=f"table-{key}"))
    parts.append("<h2 id='plots'>Plots</h2>")
    parts += [f"<img src='{p.relative_to(out).as_posix()}' alt='{html.escape(p.stem)}'>" for p in images]
    if not df.empty:
        trials = pd.DataFrame({
            "trial": [f"<a href='trials/{_file_name(t)}.html'>{html.escape(str(t))}</a>" for t in df["trial_id"]],
            **{c: df[c].map(lambda v: html.escape(fmt(v) if not isinstance(v, str) else v))
               for c in ("arm", "operator", "seed", "scope", "shape", "outcome", "reasons", "end_reason")},
            "speedup": df["speedup"].map(fmt_x), "turns": df["turns"].map(fmt), "tokens": df["tokens"].map(fmt),
            "cost": df["cost_usd"].map(fmt_money), "evaluation": df["evaluation"].map(html.escape)})
        parts.append("<h2 id='trials'>Trials</h2>" + _table_html(trials, escape=False, table_id="table-trials"))
    return _html(page_title, "\n".join(parts))


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict as dotted keys; lists kept whole."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and all(not isinstance(x, (dict, list)) for x in v.values()) and len(v) > 6:
            out[key] = ", ".join(f"{a}: {fmt(b)}" for a, b in v.items())
        elif isinstance(v, dict) and v:
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def _use_html(name: str, use: dict[str, Any]) -> str:
    """One mechanism's use as tables: its numbers and short lists as (field, value) rows, each
    list of records (queries, candidates, rounds, phases) as a table of its own."""
    fields, logs = [], []
    for k, v in _flat(use).items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            logs.append((k, v))
        elif isinstance(v, list):
            fields.append({"field": k, "value": ", ".join(fmt(x) if not isinstance(x, str) else x for x in v) or "none"})
        else:
            fields.append({"field": k, "value": v})
    parts = [f"<h3>{html.escape(name)}</h3>"]
    if fields:
        parts.append(_rows_html(fields, f"use-{name}"))
    for k, rows in logs:
        parts.append(f"<p>{html.escape(name)}.{html.escape(k)} ({len(rows)}):</p>" + _rows_html([_flat(r) for r in rows]))
    return "".join(parts)


def _trial_page(row: pd.Series, record: dict[str, Any], files: dict[str, Any]) -> str:
    ev = record.get("evaluation") or {}
    verdict = ev.get("verdict") or "not evaluated"
    source = str(record.get("evaluation_source") or "original")
    parts = [f"<p><a href='../index.html'>study</a></p><h1>{html.escape(row['trial_id'])}</h1>",
             f"<p>arm <b>{html.escape(str(row['arm']))}</b>, model {html.escape(str(row['model']))}, operator "
             f"{html.escape(str(row['operator']))}, seed {row['seed']}, {html.escape(str(row['scope']))} "
             f"({html.escape(str(row['shapes']))}{' ' + html.escape(row['shape']) if row['shape'] else ''}), "
             f"{html.escape(str(row['timing']))}; ended by {html.escape(str(row['end_reason']))}</p>",
             f"<p id='evaluation'>evaluation: {html.escape(source if source == 'original' else 'RESCORED: ' + source)}"
             f" (evaluator version {html.escape(str(ev.get('evaluator_version') or 'unknown'))})</p>",
             f"<h2>Verdict: <span id='verdict' class='{html.escape(verdict)}'>{html.escape(verdict)}</span>"
             + (f", {html.escape(fmt_x(ev.get('geomean_speedup')))} the best library" if verdict == "accepted" else "")
             + "</h2>"]
    if ev.get("reasons"):
        parts.append("<p>reasons: " + html.escape(", ".join(ev["reasons"])) + "</p>")
    for reason, msg in (ev.get("details") or {}).items():
        parts.append(f"<pre>{html.escape(str(reason))}: {html.escape(str(msg)[:4000])}</pre>")
    shapes = [x for x in ev.get("shapes") or [] if isinstance(x, dict)]
    if shapes:
        from analysis.frames import _public_ids

        public = _public_ids(record)
        role = lambda sid: "single" if len(shapes) == 1 else "unknown" if public is None else "public" if sid in public else "hidden"  # noqa: E731
        rows = [{"shape": x.get("shape_id"), "role": role(x.get("shape_id")), "correct": x.get("correct"), "max_abs_error": x.get("max_abs_error"),
                 "time_ms": (x.get("time_ms") or {}).get("median"), "best_library": x.get("best_baseline"),
                 "library_ms": (x.get("baselines_ms") or {}).get(x.get("best_baseline") or ""),
                 "speedup": fmt_x(x.get("speedup_vs_best")),
                 "margin_vs_library": (f"{x['speedup_vs_best'] - 1:+.1%}" if isinstance(x.get("speedup_vs_best"), (int, float))
                                       else None),
                 "sol_fraction": x.get("sol_fraction"), "error": x.get("error")} for x in shapes]
        parts.append("<h2>Per shape</h2>" + _rows_html(rows, "shapes"))
    agent = record.get("agent") or {}
    parts.append("<h2>Mechanism use</h2><div id='mechanisms'>")
    calls: dict[str, int] = {}
    for m in files.get("transcript") or []:
        for c in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            calls[str(c.get("name"))] = calls.get(str(c.get("name")), 0) + 1
    parts.append("<h3>tool calls (transcript)</h3>" + (_rows_html([{"tool": k, "calls": v} for k, v in sorted(calls.items())], "tool-calls")
                                                       if calls else "<p>none</p>"))
    spent = agent.get("spent") or {}
    if spent:
        parts.append("<h3>spend by owner</h3>" + _rows_html([{"owner": k, **v} for k, v in spent.items()], "spent"))
    for name, use in (agent.get("mechanisms") or {}).items():
        parts.append(_use_html(name, use))
    if not agent.get("mechanisms"):
        parts.append("<p>no mechanism recorded its use (goal-only, or a record written before mechanisms did)</p>")
    if agent.get("events"):
        parts.append("<h3>events</h3>" + _rows_html([_flat(e) for e in agent["events"]], "events"))
    harness = record.get("harness") or {}
    if harness:
        parts.append("<h3>harness</h3>" + _rows_html([{"field": k, "value": v} for k, v in _flat(harness).items()], "harness"))
    usage = record.get("usage") or {}
    if usage:
        parts.append("<h3>usage</h3>" + _rows_html([usage], "usage"))
    parts.append("</div>")
    kernel = files.get("kernel")
    parts.append("<h2>Final kernel</h2>" + (f"<pre id='kernel'>{html.escape(kernel)}</pre>" if kernel is not None
                                            else "<p id='kernel'>no kernel.py was submitted</p>"))
    parts.append("<h2>Transcript</h2><div id='transcript'>")
    for m in files.get("transcript") or []:
        role = str(m.get("role"))
        cls = f"msg {html.escape(role)}" + (" error" if m.get("is_error") else "")
        body = html.escape(str(m.get("content") or "")[:20000])
        tools = "".join(f"<pre>{html.escape(str(c.get('name')))}({html.escape(json.dumps(c.get('arguments'), default=str)[:4000])})</pre>"
                        for c in m.get("tool_calls") or [] if isinstance(c, dict))
        parts.append(f"<div class='{cls}'><b>{html.escape(role)}</b><pre>{body}</pre>{tools}</div>")
    parts.append("</div>")
    return _html(str(row["trial_id"]), "\n".join(parts))
