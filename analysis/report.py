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
    lines += s.get("footing", [])
    lines += s.get("flagged", [])
    return lines


ARM_COLUMNS = ["timing", "arm", "model", "trials", "accepted", "rejected", "crashed", "no_submission", "budget_out",
               "geomean_speedup", "ci_low", "ci_high", "sol", "tokens", "cost_usd", "turns"]
RATIO_COLUMNS = ["timing", "ratio", "model", "pairs", "counted", "refused", "unmatched", "arm_not_accepted", "baseline_not_accepted",
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


# ---------------------------------------------------------------------------------------------
# Files: tables (CSV, Markdown), plots (PNG), an offline HTML report with a page per trial.

TABLES = [  # (key in summary, title)
    ("paper", "Per arm: the paper's figures"),
    ("arms", "Arms: geomean speedup vs the best library, outcome counts"),
    ("ratios", "Matched ratios against the baseline"),
    ("operator_ratios", "Matched ratios per operator"),
    ("planning", "Planning: spread, minimum detectable effect, seeds needed"),
    ("operators", "Per operator and arm"),
    ("fast_p", "fast_p (KernelBench; baseline: the best library)"),
    ("sol_score", "SOL-ExecBench score (0.5 at the library, 1 at speed-of-light)"),
    ("hidden", "Generalisation to hidden shapes"),
    ("cost", "Cost per trial"),
    ("mechanisms", "Mechanism use per trial"),
    ("rejections", "Rejected trials by evaluator check"),
]


def _progress(msg: str, quiet: bool) -> None:
    if not quiet:
        import sys

        print(msg, file=sys.stderr, flush=True)


def write(path: Path | str, out: Path | str, baseline: str | None = None, rejected_as: float | str = 1.0,
          quiet: bool = False) -> Path:
    """Writes OUT/tables/*.csv, OUT/tables.md, OUT/plots/*.png, OUT/index.html and
    OUT/trials/<trial>.html; returns OUT/index.html."""
    from analysis import frames, plots

    out = Path(out)
    (out / "tables").mkdir(parents=True, exist_ok=True)
    _progress(f"analysis: reading records under {path}", quiet)
    s = tables.summary(path, baseline, rejected_as, activity=True)
    df = s["trials"]
    present = [(k, t) for k, t in TABLES if isinstance(s.get(k), pd.DataFrame) and not s[k].empty]
    md = [f"# Study {path}", "", f"{len(df)} trials; trials not accepted {_rule(rejected_as)}.", ""]
    md += [f"- {line}" for line in notes(s)]
    for key, title in present:
        s[key].to_csv(out / "tables" / f"{key}.csv", index=False)
        md += ["", f"## {title}", "", s[key].to_markdown(index=False, floatfmt=".4g")]
    if not df.empty:
        df.drop(columns=["key_fields", "environment_key", "harness"]).to_csv(out / "tables" / "trials.csv", index=False)
    (out / "tables.md").write_text("\n".join(md) + "\n")
    _progress(f"analysis: {len(present)} tables written to {out / 'tables'}", quiet)
    images = []
    for timing in sorted(df["timing"].unique()) if not df.empty else []:
        one = lambda t: t[t["timing"] == timing] if isinstance(t, pd.DataFrame) and not t.empty else pd.DataFrame()  # noqa: E731
        suffix = f" ({timing})"
        made = [
            plots.operator_speedups(one(s["operators"]), out / "plots" / f"operators-{timing}.png", "per-operator speedup, 95% interval" + suffix),
            plots.forest(one(s.get("ratios")), out / "plots" / f"ratios-{timing}.png", "arm ratios" + suffix),
            plots.sol_fraction(one(s["operators"]), out / "plots" / f"sol-{timing}.png", "speed-of-light fraction" + suffix),
            plots.best_so_far({by: one(s[f"best_by_{by}"]) for by in ("turn", "tokens", "cost_usd")},
                              out / "plots" / f"best-so-far-{timing}.png",
                              ("best so far, NOT at equal footing (see the notes)" if any(
                                  line.startswith(f"best-so-far ({timing},") for line in s.get("footing", []))
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
    index.write_text(_index_page(path, s, present, images, out, rejected_as))
    _progress(f"analysis: report {index}", quiet)
    return index


def _file_name(trial_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in str(trial_id))


CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#eef}td:first-child,th:first-child{text-align:left}.note{background:#fff4d6;padding:4px 8px;margin:2px 0}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}
.msg{border-left:4px solid #ccc;padding:2px 8px;margin:6px 0}.user{border-color:#4a7}.assistant{border-color:#47c}
.tool{border-color:#c84}.error{background:#fee}.accepted{color:#070}.rejected{color:#a00}"""


def _html(title: str, body: str) -> str:
    import html

    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>{body}</body></html>")


def _table_html(df: pd.DataFrame, **kw) -> str:
    return df.to_html(index=False, float_format=lambda x: f"{x:.4g}", na_rep="", border=0, **kw)


def _rows_html(rows: list[dict[str, Any]], table_id: str) -> str:
    """A small table without pandas (one per trial page: thousands of pages)."""
    import html

    def cell(v):
        return "" if v is None else f"{v:.4g}" if isinstance(v, float) else html.escape(str(v))

    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table id='{table_id}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _index_page(path, s: dict[str, Any], present, images, out: Path, rejected_as) -> str:
    import html

    df = s["trials"]
    parts = [f"<h1>Study {html.escape(str(path))}</h1>",
             f"<p id='summary'>{len(df)} trials; trials not accepted {html.escape(_rule(rejected_as))}.</p>"]
    parts += [f"<div class='note'>{html.escape(line)}</div>" for line in notes(s)]
    if not df.empty and (df["timing"] == "cpu-interpreted").any():
        parts.append("<div class='note'>cpu-interpreted: Triton's CPU interpreter, not GPU figures</div>")
    for key, title in present:
        parts.append(f"<h2 id='{key}'>{html.escape(title)}</h2>" + _table_html(s[key], table_id=f"table-{key}"))
    parts.append("<h2 id='plots'>Plots</h2>")
    parts += [f"<img src='{p.relative_to(out).as_posix()}' alt='{html.escape(p.stem)}'>" for p in images]
    if not df.empty:
        trials = df[["trial_id", "arm", "model", "operator", "seed", "timing", "outcome", "reasons", "end_reason",
                     "speedup", "turns", "tokens", "cost_usd"]].copy()
        for col in trials.columns:  # the table is written unescaped for its links: escape every text cell here
            if not pd.api.types.is_numeric_dtype(trials[col]) and not pd.api.types.is_bool_dtype(trials[col]):
                trials[col] = trials[col].map(lambda v: html.escape(str(v)) if v is not None else "")
        trials["trial_id"] = [f"<a href='trials/{_file_name(html.unescape(t))}.html'>{t}</a>" for t in trials["trial_id"]]
        parts.append("<h2 id='trials'>Trials</h2>" + _table_html(trials, escape=False, table_id="table-trials"))
    return _html(f"Study {path}", "\n".join(parts))


def _trial_page(row: pd.Series, record: dict[str, Any], files: dict[str, Any]) -> str:
    import html
    import json

    ev = record.get("evaluation") or {}
    verdict = ev.get("verdict") or "not evaluated"
    parts = [f"<p><a href='../index.html'>study</a></p><h1>{html.escape(row['trial_id'])}</h1>",
             f"<p>arm <b>{html.escape(str(row['arm']))}</b>, model {html.escape(str(row['model']))}, operator "
             f"{html.escape(str(row['operator']))}, seed {row['seed']}, {html.escape(str(row['timing']))}; ended by "
             f"{html.escape(str(row['end_reason']))}</p>",
             f"<h2>Verdict: <span id='verdict' class='{html.escape(verdict)}'>{html.escape(verdict)}</span></h2>"]
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
                 "speedup": x.get("speedup_vs_best"),
                 "margin_vs_library": (x["speedup_vs_best"] - 1) if isinstance(x.get("speedup_vs_best"), (int, float)) else None,
                 "sol_fraction": x.get("sol_fraction"), "error": x.get("error")} for x in shapes]
        parts.append("<h2>Per shape</h2>" + _rows_html(rows, "shapes"))
    mech = {"harness": record.get("harness"), "events": (record.get("agent") or {}).get("events"),
            "mechanisms": record.get("mechanisms"), "usage": record.get("usage")}
    calls: dict[str, int] = {}
    for m in files.get("transcript") or []:
        for c in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            calls[str(c.get("name"))] = calls.get(str(c.get("name")), 0) + 1
    mech["tool_calls"] = calls
    parts.append("<h2>Mechanism use</h2><pre id='mechanisms'>" + html.escape(json.dumps(mech, indent=1, default=str)) + "</pre>")
    kernel = files.get("kernel")
    parts.append("<h2>Final kernel</h2>" + (f"<pre id='kernel'>{html.escape(kernel)}</pre>" if kernel is not None
                                            else "<p id='kernel'>no kernel.py was submitted</p>"))
    parts.append("<h2>Transcript</h2><div id='transcript'>")
    for m in files.get("transcript") or []:
        role = str(m.get("role"))
        cls = f"msg {html.escape(role)}" + (" error" if m.get("is_error") else "")
        text = html.escape(str(m.get("content") or "")[:20000])
        tools = "".join(f"<pre>{html.escape(str(c.get('name')))}({html.escape(json.dumps(c.get('arguments'), default=str)[:4000])})</pre>"
                        for c in m.get("tool_calls") or [] if isinstance(c, dict))
        parts.append(f"<div class='{cls}'><b>{html.escape(role)}</b><pre>{text}</pre>{tools}</div>")
    parts.append("</div>")
    return _html(str(row["trial_id"]), "\n".join(parts))
