"""The report files: tables (CSV, Markdown), plots (PNG), the offline HTML report, checked as
files and as a browser renders them (headless Chromium)."""
import html
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from analysis import report
from analysis.__main__ import main
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
    assert "evaluate({})" in searched and '"tool_calls": {\n  "evaluate": 2' in searched
    [empty] = [html.unescape(p.read_text()) for p in (out / "trials").glob("rmsnorm--kda05--*s8*.html")]
    assert "no kernel.py was submitted" in empty and "no_submission" in empty and '"review"' in empty


def test_cli_prints_the_tables_and_writes_the_report(study, tmp_path, capsys):
    assert main([str(study), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "kda05 / goal_only" in out and f"report: {tmp_path / 'r' / 'index.html'}" in out
    assert main([str(study), "--rejected-as", "often"]) == 2


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
