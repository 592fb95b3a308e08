"""The HTML report's pages: the index (title, headline, evaluation, notes, the rules in words,
every table as a reader reads it, the plots, the trials) and a page per trial (its verdict and
shapes, its mechanisms' use as tables, the final kernel, the transcript). Offline: nothing is
fetched from elsewhere, and every text an agent wrote is escaped."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.analysis.report import RULES, evaluation_line, headline, notes, title
from ablate.analysis.views import fmt, fmt_money, fmt_x, view


def file_name(trial_id: str) -> str:
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
    if isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v):
        v = ", ".join(x if isinstance(x, str) else fmt(x) for x in v) or "none"
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


def index_page(s: dict[str, Any], present, images, out: Path) -> str:
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
    plots = ["<h2 id='plots'>Plots</h2>"] + [f"<img src='{p.relative_to(out).as_posix()}' alt='{html.escape(p.stem)}'>"
                                           for p in images]
    for i, (key, name) in enumerate(present):
        t, caption = view(s, key)
        parts.append(f"<h2 id='{key}'>{html.escape(name)}</h2>"
                     + (f"<p class='caption'>{html.escape(caption)}</p>" if caption else "")
                     + _table_html(t, table_id=f"table-{key}"))
        if i == 0:
            parts += plots  # the headline's table, then its pictures, then the detail
    if not present:
        parts += plots
    if not df.empty:
        trials = pd.DataFrame({
            "trial": [f"<a href='trials/{file_name(t)}.html'>{html.escape(str(t))}</a>" for t in df["trial_id"]],
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


def trial_page(row: pd.Series, record: dict[str, Any], files: dict[str, Any]) -> str:
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
        from ablate.analysis.frames import _public_ids

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
