"""The study's report: ``text`` for the terminal; ``write`` for files (CSV and Markdown tables,
PNG plots, an offline HTML report with a page per trial).

What a reader sees first: the title (the study; "mixes designs" when its trials do; "rescored"
when figures come from a rescoring), a headline sentence per comparison, which evaluation the
figures come from, the notes (skipped records, refused pairs, Holm's family-wise statement),
the scoring rule and the two intervals in words, then the tables. The CSV files keep every
number as computed; the text, Markdown and HTML show them for reading (``views``). The HTML
pages are built in ``pages``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.analysis import scoring, tables
from ablate.analysis.views import TABLES, fmt_interval, fmt_rate, fmt_x, unpaired_text, view


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
    rest = ", the rest as judged when they ran" if len(rescored) < len(df) else ""
    return (f"evaluation: RESCORED: {len(rescored)} of {len(df)} trials read from a rescoring (python -m ablate.rescore; "
            f"evaluator version {versions}, judged on {devices}){rest}; asked for: {s['evaluation']}; "
            f"--evaluation original shows the figures the trials ran with")


def _ratio_sentence(r: dict[str, Any]) -> str:
    arm, base = r["arm"], r["baseline"]
    where = f"{r['scope']}, {r['shapes']} shapes, {r['timing']}; {r['operators']} operator(s) x {r['seeds']} seed(s)"
    if not r["pairs"]:
        return f"{arm} against {base} ({where}): no matched pairs yet ({unpaired_text(r)})."
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


RULES = [f"Scoring, {scoring.SCORING}.", f"{scoring.INTERVAL_NAMES}.",
         f"wins/ties/losses: a tie within +-{scoring.TIE_BAND:.0%}; pairs never cross a scope or shape set."]


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
    shows both scores of the one rule (``scoring.SCORING``); a value other than 1.0 says so."""
    out = render(tables.summary(path, baseline, evaluation=evaluation))
    if rejected_as not in (None, 1.0, 1, "1.0"):
        out = (f"note: rejected_as={rejected_as!r} is no longer read: every table shows the produced score (failures "
               f"left out, counted in the correctness rate) and the fallback score (failures at 1.0x)\n") + out
    return out


# --- files: tables (CSV, Markdown), plots (PNG), an offline HTML report with a page per trial ---

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
    from ablate.analysis import frames, pages, plots

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
        page = pages.trial_page(row, records.get(row["trial_id"], {}), frames.trial_files(row["dir"]) if row["dir"] else {})
        (out / "trials" / f"{pages.file_name(row['trial_id'])}.html").write_text(page)
        if i % 1000 == 0 or i == len(df):
            _progress(f"analysis: trial pages {i}/{len(df)}", quiet)
    index = out / "index.html"
    index.write_text(pages.index_page(s, present, images, out))
    _progress(f"analysis: report {index}", quiet)
    return index
