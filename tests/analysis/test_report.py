"""The report files: tables (CSV, Markdown), plots (PNG), the offline HTML report, checked as
files and as a browser renders them (headless Chromium)."""
import html
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import json

from ablate.analysis import plots, report, tables, views
from ablate.analysis.__main__ import main
from benchmarks.synthetic import write_study, write_trial

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    write_study(root, {"goal_only": 1.0, "kda05": 1.3}, ["rmsnorm", "softmax"], seeds=3, sd=0.05)
    write_trial(root, "kda05", 7, None, "rejected")
    write_trial(root, "goal_only", 7, 1.1, shapes="eval", shape_speedups=[1.2, 1.0, 0.9, 1.1])
    write_trial(root, "kda05", 8, None, "no_submission", events=[{"event": "review", "round": 1}])
    return root / "study"


@pytest.fixture(scope="module")
def written(study, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    index = report.write(study, out, "goal_only", quiet=True)
    return out, index


def test_tables_plots_and_a_page_per_trial_are_written(study, written):
    out, index = written
    assert index == out / "index.html"
    for name in ("arms", "ratios", "operator_ratios", "planning", "paper", "operators", "fast_p", "sol_score", "cost", "mechanisms",
                 "rejections", "trials"):
        assert (out / "tables" / f"{name}.csv").stat().st_size > 0, name
    md = (out / "tables.md").read_text()
    assert "## Matched ratios against the baseline" in md and "| kda05 / goal_only |" in md.replace("  ", " ")
    pngs = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert pngs == ["best-so-far-cuda.png", "operators-cuda.png", "ratios-cuda.png", "sol-cuda.png"]
    assert all((out / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    pages = list((out / "trials").glob("*.html"))
    assert len(pages) == len(list(study.rglob("record.json"))) == 15
    text = index.read_text() + "".join(p.read_text() for p in pages)
    assert not re.search(r"""(src|href)=['"]?(https?:)?//""", text)  # offline: nothing fetched from elsewhere


def test_a_trial_page_has_its_verdict_margins_kernel_transcript_and_mechanism_use(written):
    out, _ = written
    [page] = [p.read_text() for p in (out / "trials").glob("rmsnorm--goal_only--*s7*.html")]
    assert "id='verdict' class='accepted'" in page and "margin_vs_library" in page
    assert page.count("<td>hidden</td>") == 3 and page.count("<td>public</td>") == 1  # the shapes' roles
    assert "def kernel" in page and "id='transcript'" in page
    [searched] = [html.unescape(p.read_text()) for p in (out / "trials").glob("softmax--kda05--*s1*.html")]
    assert "evaluate({})" in searched and "<tr><td>evaluate</td><td>2</td></tr>" in searched  # tool calls, a table
    [empty] = [html.unescape(p.read_text()) for p in (out / "trials").glob("rmsnorm--kda05--*s8*.html")]
    assert "no kernel.py was submitted" in empty and "no_submission" in empty
    assert re.search(r"<table id='events'>.*<td>review</td><td>1</td>", empty)  # the event and its round


def test_a_trial_page_shows_each_mechanisms_use_as_tables(tmp_path):
    """What the harness records in agent.mechanisms (the old page read a key records do not have
    and showed "mechanisms": null)."""
    use = {"knowledge": {"queries": 2, "reads": 1, "pages_found": ["gemm", "triton"], "pages_read": ["gemm"],
                         "log": [{"query": "rmsnorm warps", "hits": ["row-reductions#RMSNorm"]},
                                 {"query": "bf16 loads", "hits": []}]},
           "reviewer": {"rounds": 2, "verdicts": ["revise", "approve"], "approved": True}}
    write_trial(tmp_path, "kda05", 0, 1.2, mechanisms=use)
    report.write(tmp_path / "study", tmp_path / "r", quiet=True)
    [page] = [p.read_text() for p in (tmp_path / "r" / "trials").glob("*.html")]
    assert "<table id='use-knowledge'>" in page and "<tr><td>queries</td><td>2</td></tr>" in page
    assert "<tr><td>pages_found</td><td>gemm, triton</td></tr>" in page
    assert "knowledge.log (2):" in page and "<td>rmsnorm warps</td>" in page and "<td>bf16 loads</td>" in page
    assert "<tr><td>approved</td><td>yes</td></tr>" in page and "<tr><td>verdicts</td><td>revise, approve</td></tr>" in page
    assert "null" not in page and "<pre id='mechanisms'>" not in page


def test_cli_prints_the_tables_and_writes_the_report(study, tmp_path, capsys):
    assert main([str(study), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "kda05 / goal_only" in out and f"report: {tmp_path / 'r' / 'index.html'}" in out
    with pytest.raises(SystemExit) as e:  # one rule for every trial: no option to change it
        main([str(study), "--rejected-as", "exclude"])
    assert e.value.code == 2


def test_curves_not_at_equal_footing_are_said_in_the_report_not_plotted_silently(tmp_path):
    write_trial(tmp_path, "kda05", 0, 1.5, evaluate_calls=[1.2])  # trusted points during its trial
    write_trial(tmp_path, "goal_only", 0, 1.0)  # only its final judgement (no evaluate tool, no snapshots)
    index = report.write(tmp_path / "study", tmp_path / "r", "goal_only", quiet=True)
    line = ("best-so-far (cuda, scripted-kernel-search-v1): not at equal footing: kda05 with trusted points during "
            "the trial, goal_only with only the final judgement")
    assert f"- {line}" in (tmp_path / "r" / "tables.md").read_text()
    assert html.escape(line) in index.read_text()


def test_a_store_of_only_broken_records_still_gets_a_report(tmp_path):
    d = tmp_path / "s" / "t1"
    d.mkdir(parents=True)
    (d / "record.json").write_text("{not json")
    index = report.write(tmp_path / "s", tmp_path / "r", "goal_only", quiet=True)
    assert "skipped 1 record(s)" in index.read_text() and "t1" in index.read_text()


def chromium(*args, timeout=120):
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--user-data-dir=" + args[0], *args[1:]], capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (.ci/run installs it)")
def test_the_report_renders_in_headless_chromium(written, tmp_path):
    out, index = written
    dom = chromium(str(tmp_path / "profile"), "--dump-dom", index.as_uri()).stdout
    assert "id=\"table-ratios\"" in dom and "kda05 / goal_only" in dom
    assert len(re.findall(r"<img src=\"plots/[^\"]+\.png\"", dom)) == 4
    links = re.findall(r"href=\"(trials/[^\"]+\.html)\"", dom)
    assert len(links) == 15 and all((out / link).is_file() for link in links)
    page = chromium(str(tmp_path / "profile"), "--dump-dom", (out / links[0]).as_uri()).stdout
    assert "id=\"verdict\"" in page and "id=\"transcript\"" in page
    shot = tmp_path / "shot.png"
    chromium(str(tmp_path / "profile"), "--window-size=1300,3000", f"--screenshot={shot}", index.as_uri())
    import matplotlib.image

    img = (matplotlib.image.imread(shot)[..., :3] * 255).astype(int)
    assert img.shape[:2] == (3000, 1300)
    # matplotlib's first colour (tab:blue, 31 119 180) shows only if the plots were loaded and drawn
    blue = (np.abs(img - np.array([31, 119, 180])).sum(axis=2) < 30).sum()
    assert blue > 200, blue
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 50  # text, tables and plots, not a blank page


@pytest.mark.parametrize("damage", [
    {"evaluation": {"verdict": "accepted", "shapes": {"not": "a list"}, "geomean_speedup": "fast"}},
    {"evaluation": {"verdict": "accepted", "shapes": [1, None, {"shape_id": 3, "time_ms": 5}], "geomean_speedup": -2}},
    {"agent": {"turns": "many", "events": "none"}, "usage": {"total_tokens": None, "cost_usd": "free"}},
    {"match_fields": ["a", "list"], "environment_key": "a string", "harness": None},
    {"mechanisms": {"knowledge": "all", "reviewer": {"rounds": "two", "events": [1, {"event": "review"}]}}},
    {"seed": "one"},
    {"arm": None},
])
def test_a_damaged_record_never_crashes_the_report(tmp_path, damage):
    import json

    write_trial(tmp_path, "goal_only", 0, 1.0)
    path = write_trial(tmp_path, "kda05", 0, 2.0, evaluate_calls=[1.5])
    rec = json.loads((path / "record.json").read_text()) | damage
    (path / "record.json").write_text(json.dumps(rec))
    (path / "transcript.jsonl").write_text('{"role": "assistant", "tool_calls": "x"}\n[1, 2]\nnot json\n')
    (path / "model_calls.jsonl").write_text('{"response": {"usage": {"total_tokens": "x"}}}\n')
    index = report.write(tmp_path / "study", tmp_path / "r", "goal_only", quiet=True)
    assert index.is_file() and "goal_only" in index.read_text()
    assert "goal_only" in report.text(tmp_path / "study", "goal_only")


def test_what_an_agent_wrote_cannot_inject_markup_into_the_report(tmp_path):
    import json

    path = write_trial(tmp_path, "kda05", 0, None, "rejected")
    rec = json.loads((path / "record.json").read_text())
    rec["evaluation"]["reasons"] = ["<script>alert(1)</script>"]
    rec["evaluation"]["details"] = {"incorrect": "<img src=x onerror=alert(2)>"}
    (path / "record.json").write_text(json.dumps(rec))
    (path / "kernel.py").write_text("</pre><script>alert(3)</script>")
    (path / "transcript.jsonl").write_text(json.dumps({"role": "assistant", "content": "<script>alert(4)</script>",
                                                       "tool_calls": []}) + "\n")
    out = tmp_path / "r"
    report.write(tmp_path / "study", out, quiet=True)
    text = (out / "index.html").read_text() + "".join(p.read_text() for p in (out / "trials").glob("*.html"))
    assert "<script" not in text and "<img src=x" not in text and "&lt;script&gt;alert(3)" in text


def test_the_report_opens_with_a_headline_says_which_evaluation_and_keeps_wide_tables_scrolling(study, written):
    assert report.text(study, "goal_only").splitlines()[1].startswith("kda05 against goal_only")  # under the title
    out, index = written
    page = index.read_text()
    assert page.index("id='headline'") < page.index("<table")
    headline = re.search(r"<div id='headline'>(.*?)</div>", page).group(1)
    assert "kda05 against goal_only" in headline and "correct kernels in" in headline and "fallback" in headline
    assert "evaluation: original for every trial" in page and "RESCORED" not in page and "rescored</" not in page
    assert page.count("<table") == page.count("<div class='wide'><table") > 5 and "overflow-x:auto" in page
    md = (out / "tables.md").read_text()
    assert md.splitlines()[2].startswith("kda05 against goal_only")


def _readable(text):
    """Every number in the report written for reading: no scientific notation, no NaN."""
    # scientific notation as Python prints it (3.419e+05, 8.898e-05); a trial id's hex (335792e0) is no number
    assert not re.search(r"\d[eE][+-]\d", text), re.search(r".{30}\d[eE][+-]\d.{30}", text).group(0)
    assert not re.search(r"\b(NaN|nan|None|inf)\b", text), re.search(r".{30}\b(NaN|nan|None|inf)\b.{30}", text).group(0)


def test_numbers_are_written_for_reading(tmp_path):
    """A CPU interpreter's 0.002x speedups and 342,362 tokens: not 0.00x, 2e-03 or 3.424e+05."""
    for seed in range(2):
        write_trial(tmp_path, "goal_only", seed, 0.00211 * (1 + seed / 10), gpu=False, tokens=342362, cost_usd=0.0)
        write_trial(tmp_path, "kda05", seed, 0.0000889, gpu=False, tokens=342362, cost_usd=0.0)
    write_trial(tmp_path, "kda05", 2, None, "rejected", gpu=False, cost_usd=0.0)
    text = report.text(tmp_path / "study", "goal_only")
    index = report.write(tmp_path / "study", tmp_path / "r", "goal_only", quiet=True)
    for shown in (text, (tmp_path / "r" / "tables.md").read_text(), index.read_text()):
        _readable(shown)
        assert "0.00x" not in shown and "0.0000889x" in shown and "342,362" in shown
    assert "0.0000889x" in index.read_text()  # a trial's speedup in the trials table
    assert views.fmt(float("nan")) == "—" and views.fmt_x(0.002) == "0.002x" and views.fmt(341_900.0) == "341,900"
    assert views.fmt(8.898e-05) == "0.000089" and views.fmt_x(1.0) == "1.0x" and views.fmt_p(0.00004) == "<0.001"


def test_figures_from_a_rescoring_are_marked_and_the_original_can_be_asked_for(tmp_path, capsys):
    from ablate.store import Store

    for seed in range(2):
        write_trial(tmp_path, "goal_only", seed, 0.5)
        write_trial(tmp_path, "kda05", seed, 0.5)
    for trial in sorted((tmp_path / "study").glob("*--s*")):
        ev = json.loads((trial / "evaluation.json").read_text())
        ev.update(geomean_speedup=2.0 if "--kda05--" in trial.name else 1.0, evaluator_version="9",
                  device={"name": "NVIDIA H200"})
        Store(tmp_path).add_rescoring(trial, {"evaluation": ev, "evaluator_version": "9", "device": "NVIDIA H200",
                                              "shape_set": "smoke", "rescored_at": "2026-12-03T00:00:00"}, "r9")
    latest = tables.summary(tmp_path / "study", "goal_only")
    assert report.title(latest).endswith("— rescored")
    assert "RESCORED: 4 of 4 trials" in report.evaluation_line(latest) and "NVIDIA H200" in report.evaluation_line(latest)
    assert latest["ratios"].iloc[0]["ratio"] == pytest.approx(2.0)
    original = tables.summary(tmp_path / "study", "goal_only", evaluation="original")
    assert "rescored" not in report.title(original) and original["ratios"].iloc[0]["ratio"] == pytest.approx(1.0)
    assert main([str(tmp_path / "study"), "--evaluation", "original", "--no-files"]) == 0
    assert "evaluation: original for every trial" in capsys.readouterr().out
    assert main([str(tmp_path / "study"), "--evaluation", "9", "--no-files"]) == 0
    assert "RESCORED" in capsys.readouterr().out
    assert main([str(tmp_path / "study"), "--evaluation", "7", "--no-files"]) == 2
    [err] = capsys.readouterr().err.strip().splitlines()
    assert "no trial" in err and "evaluator version '7'" in err and "9" in err


def test_a_pair_with_one_side_rescored_is_refused_and_named(tmp_path):
    from ablate.store import Store

    write_trial(tmp_path, "goal_only", 0, 1.0)
    kda = write_trial(tmp_path, "kda05", 0, 1.0)
    ev = dict(json.loads((kda / "evaluation.json").read_text()), geomean_speedup=3.0)
    Store(tmp_path).add_rescoring(kda, {"evaluation": ev, "rescored_at": "2026-12-03T00:00:00"}, "later")
    s = tables.summary(tmp_path / "study", "goal_only")
    assert s["ratios"].iloc[0]["pairs"] == 0
    [line] = tables.refusal_lines(s["refusals"])
    assert "one side rescored" in line


def test_holm_across_arms_the_familywise_statement_and_the_forest_marks(tmp_path, monkeypatch):
    write_study(tmp_path, {"goal_only": 1.0, "kda05": 1.5, "goal_only+knowledge": 1.0, "goal_only+workflow": 1.02},
                ["rmsnorm", "softmax", "layernorm"], seeds=3, sd=0.05)
    s = tables.summary(tmp_path / "study", "goal_only")
    r = s["ratios"].set_index("arm")
    assert (r["family"] == 3).all()
    from ablate.analysis import stats

    assert r["ratio_these_p_holm"].tolist() == pytest.approx(stats.holm(r["ratio_these_p"].to_numpy()).tolist())
    assert r.loc["kda05", "ratio_these_p_holm"] < 0.05 < r.loc["goal_only+knowledge", "ratio_these_p_holm"]
    [line] = s["family"]
    assert line.startswith("3 arms against goal_only") and "produced, these operators: kda05" in line
    assert "Holm" in report.render(s) and f"(Holm {views.fmt_p(r.loc['kda05', 'ratio_these_p_holm'])})" in report.render(s)
    drawn = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    plots.forest(s["ratios"], tmp_path / "f.png")
    ax = drawn["fig"].axes[0]
    label_at = {round(y): t.get_text() for y, t in zip(ax.get_yticks(), ax.get_yticklabels())}
    filled = {label_at[round(line.get_ydata()[0])] for line in ax.lines
              if line.get_marker() == "o" and line.get_markerfacecolor() != "white"}
    survived = {f"{arm} / goal_only, {score}" for arm in r.index for score, prefix in (("produced", "ratio"), ("fallback", "fallback_ratio"))
                if r.loc[arm, f"{prefix}_these_p_holm"] < 0.05}
    plots.plt.close(drawn["fig"])
    assert filled == survived and "kda05 / goal_only, produced" in filled


def test_one_arm_makes_no_family_and_no_holm_column_in_the_view(study):
    s = tables.summary(study, "goal_only")
    assert s["family"] == [] and "Holm" not in report.render(s).split("Matched ratios")[1]


def _overlaps(fig) -> list[tuple[str, str]]:
    fig.canvas.draw()
    out = []
    for ax in fig.axes:
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            boxes = [(t.get_text(), t.get_window_extent()) for t in labels if t.get_visible() and t.get_text()]
            out += [(a, b) for i, (a, x) in enumerate(boxes) for b, y in boxes[i + 1:] if x.overlaps(y)]
    return out


@pytest.mark.parametrize("speedups", [(0.002, 0.0019), (0.9, 1.1), (0.3, 2.4), (1.0, 1.0), (0.5, 40.0)])
def test_no_tick_labels_overlap_on_any_plot(tmp_path, monkeypatch, speedups):
    for seed in range(3):
        for op in ("rmsnorm", "softmax", "layernorm", "cross_entropy", "swiglu"):
            write_trial(tmp_path, "goal_only", seed, speedups[0] * (1 + seed / 50), operator=op, evaluate_calls=[speedups[0]])
            write_trial(tmp_path, "goal_only+knowledge", seed, speedups[1], operator=op, evaluate_calls=[speedups[1]])
    s = tables.summary(tmp_path / "study", "goal_only", activity=True)
    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig) or path)
    plots.forest(s["ratios"], tmp_path / "a.png")
    plots.operator_speedups(s["operators"], tmp_path / "b.png")
    plots.sol_fraction(s["operators"], tmp_path / "c.png")
    plots.best_so_far({by: s[f"best_by_{by}"] for by in ("turn", "tokens", "cost_usd")}, tmp_path / "d.png")
    assert len(figs) == 4
    for fig in figs:
        assert _overlaps(fig) == []
        plots.plt.close(fig)
        for ax in fig.axes:
            assert len([t for t in ax.get_yticklabels() if t.get_text()]) <= 8
            assert not any(re.search(r"\de[+-]?\d", t.get_text()) for t in ax.get_xticklabels() + ax.get_yticklabels())


def test_a_spend_nobody_recorded_gets_no_panel_but_a_word(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 1.5, cost_usd=0.0, evaluate_calls=[1.2])
    s = tables.summary(tmp_path / "study", activity=True)
    shown, missing = plots.spend_panels({by: s[f"best_by_{by}"] for by in ("turn", "tokens", "cost_usd")})
    assert list(shown) == ["turn", "tokens"] and missing == ["cost"]  # the title says "no cost recorded"
