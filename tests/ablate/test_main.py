"""`python -m ablate` end to end, offline, as a user runs it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ablate(*args, env=None, timeout=600):
    e = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "ablate", *args], cwd=ROOT, env=e, capture_output=True,
                          text=True, timeout=timeout)


def records(store):
    return [json.loads(p.read_text()) for p in sorted(Path(store).rglob("record.json"))]


def own_tool_results(trial_dir):
    """(tool, command, result, is_error) for every tool call but file reads/writes and submit."""
    calls, out = {}, []
    for line in (trial_dir / "transcript.jsonl").read_text().splitlines():
        m = json.loads(line)
        for c in m.get("tool_calls") or []:
            calls[c["id"]] = c
        if m["role"] == "tool" and m["tool_call_id"] in calls:
            c = calls[m["tool_call_id"]]
            if c["name"] not in ("read_file", "write_file", "list_files", "submit"):
                out.append((c["name"], c["arguments"].get("command", ""), m["content"], m["is_error"]))
    return out


@pytest.mark.slow
@pytest.mark.timeout(2400)  # about 80 s on two quiet cores, twice that and more when they are shared
def test_default_study_runs_offline_and_prints_the_ratio(tmp_path):
    r = ablate(f"store={tmp_path}", timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = records(tmp_path / "smoke")
    assert len(recs) == 4
    assert sorted((x["arm"], x["seed"]) for x in recs) == [("goal_only", 0), ("goal_only", 1), ("kda05", 0), ("kda05", 1)]
    assert len({x["match_key"] for x in recs}) == 2  # each seed's two arms pair up
    for x in recs:
        assert x["model"]["id"] == "scripted-kernel-search-v1" and x["end_reason"] == "submitted"
        assert x["evaluation"]["verdict"] == "accepted", x["evaluation"].get("reasons")
        assert x["evaluation"]["timing"] == "cpu-interpreted"
    trial_dirs = [p.parent for p in (tmp_path / "smoke").rglob("record.json")]
    for d in trial_dirs:
        assert (d / "kernel.py").is_file() and (d / "transcript.jsonl").is_file() and (d / "model_calls.jsonl").is_file()
    assert "kda05 / goal_only" in r.stdout and "cpu-interpreted" in r.stdout
    report = tmp_path / "smoke" / "report"
    assert f"report: {report}/index.html (tables: {report}/tables.md, CSV in {report}/tables)" in r.stdout
    assert (f"again, from the records alone: python -m ablate.analysis {tmp_path}/smoke --baseline goal_only"
            in r.stdout.splitlines())
    assert (report / "index.html").is_file()
    kda = [x for x in recs if x["arm"] == "kda05"][0]
    assert kda["agent"]["mechanisms"]["reviewer"]["rounds"] >= 1  # the record shows each mechanism's use
    for d in trial_dirs:  # each arm's own tools worked, not only the final evaluation
        used = own_tool_results(d)
        arm = json.loads((d / "record.json").read_text())["arm"]
        assert used, d
        if arm == "goal_only":  # its only measure: its own check script, run in the sandbox's shell
            checks = [c for name, cmd, c, err in used if name == "bash" and "check.py" in cmd]
            assert checks and all("RESULT correct=1" in c for c in checks), checks
        else:
            assert {name for name, *_ in used} >= {"evaluate", "profile"}
            assert all("accepted" in c for name, _, c, err in used if name == "evaluate")
            assert not any(err for name, _, c, err in used if name == "profile"), used
        assert not any("command not found" in c for _, _, c, _ in used)
    # resume: a second run finds every trial and runs none
    again = ablate(f"store={tmp_path}", timeout=600)
    assert again.returncode == 0 and "4 of 4 trials already" in again.stdout
    assert len(records(tmp_path / "smoke")) == 4


def test_help_says_what_it_does_with_examples_and_the_other_commands():
    r = ablate("--help", timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("ablate: a controlled ablation benchmark")
    studies = next(line for line in out.splitlines() if line.startswith("study: "))
    assert {"justgoal", "mechanisms", "smoke"} <= set(studies.removeprefix("study: ").split(", "))  # conf/study
    for text in ("Examples:", "dry_run=true", "python -m ablate.analysis runs/STUDY",
                 "python -m ablate.rescore runs/STUDY", "python -m ablate.evaluate --operator OP", "--hydra-help"):
        assert text in out, text
    assert "== Config ==" not in out and "max_output_bytes" not in out  # not the composed config
    assert len(out.splitlines()) < 60


def test_a_dry_run_prints_the_plan_with_its_cost_and_runs_nothing(tmp_path):
    from ablate import operators

    r = ablate("study=justgoal", "+model=fable-5.1", "dry_run=true", f"store={tmp_path}", timeout=300)
    assert r.returncode == 0, r.stderr
    single = sum(len(operators.get(n).shape_set("eval")) for n in operators.REGISTRY) * 3 * 4
    multi = len(operators.REGISTRY) * 3 * 4
    out = r.stdout
    assert "arms (4): goal_only, kda05, goal_only+knowledge, goal_only+workflow" in out
    assert f"= {single} trials" in out and f"= {multi} trials" in out
    assert f"{single + multi} planned, 0 already stored in {tmp_path}/justgoal, {single + multi} to run" in out
    assert f"model cost: at most ${(single + multi) * 50:,} ({single + multi} trials x $50.00, budget.cost_usd" in out
    assert "ANTHROPIC_API_KEY is not set" in out  # said, not stopped at: nothing is called
    assert "budget.wall_s 7200 s" in out
    assert not list(tmp_path.rglob("record.json")) and not (tmp_path / "justgoal").exists()


def test_a_dry_run_is_not_a_sweep(tmp_path):
    r = ablate("-m", "dry_run=true", f"store={tmp_path}", timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: dry_run=true plans one run and launches nothing; drop -m (one dry run per point of the sweep)"]


@pytest.mark.parametrize("override,line", [
    ("+study.seed=[0]", "error: +study.seed=[0]: unknown key 'seed' (did you mean 'seeds'?); valid keys of study: "
                        "name, seeds, baseline_arm, arms, model, ablation, scopes, description"),
    ("study.seed=[0]", "error: study.seed=[0]: unknown key 'seed' (did you mean 'seeds'?); valid keys of study: "
                       "name, seeds, baseline_arm, arms, model, ablation, scopes, description"),
    ("+budget.turnz=1", "error: +budget.turnz=1: unknown key 'turnz' (did you mean 'turns'?); valid keys of budget: "
                        "turns, tokens, cost_usd, wall_s, tool_s, gpu_s"),
    ("+foo=1", "error: +foo=1: unknown key 'foo'; valid keys of the config: operators, budget, study, sandbox, store, "),
    ("study.arms.kda05.mechanisms.knowlege={}", "error: study.arms.kda05.mechanisms.knowlege={}: unknown key 'knowlege' "
     "(did you mean 'knowledge'?); valid keys of study.arms.kda05.mechanisms: knowledge, "),
])
def test_an_unknown_key_is_refused_in_one_line_with_the_valid_ones_plus_or_not(tmp_path, override, line):
    r = ablate(override, f"store={tmp_path}", timeout=300)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(line), r.stderr


def test_a_misspelt_model_key_names_the_valid_ones_and_a_valid_one_asks_for_the_model_first(tmp_path):
    r = ablate("model.max_token=100", f"store={tmp_path}", timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "unknown key 'max_token' (did you mean 'max_tokens'?); valid keys of model: name, provider, id, " in r.stderr
    r = ablate("model.max_tokens=100", f"store={tmp_path}", timeout=300)
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: model.max_tokens=100: no model is set in this run to change; give +model=NAME first (e.g. "
        "+model=fable-5.1), or change the study's own model with study.model.KEY=...")


def test_missing_api_key_stops_before_any_trial_with_one_line(tmp_path):
    r = ablate("+harness=kda05", "+model=fable-5.1", f"store={tmp_path}", timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "ANTHROPIC_API_KEY" in lines[0], r.stderr
    assert not records(tmp_path)


@pytest.mark.parametrize("override,valid", [("+harness=nope", "goal_only"), ("operators=nope", "rmsnorm"),
                                             ("+model=nope", "scripted"), ("study=nope", "smoke")])
def test_unknown_group_option_lists_the_valid_choices(tmp_path, override, valid):
    r = ablate(override, f"store={tmp_path}", timeout=120)
    assert r.returncode != 0
    assert "Available options" in r.stderr and valid in r.stderr and "Traceback" not in r.stderr


def test_unknown_operator_name_is_one_line(tmp_path):
    r = ablate("operators.names=[nope]", f"store={tmp_path}", timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == "error: unknown operator 'nope'; valid operators: " + r.stderr.strip().split("valid operators: ")[1]
    assert "rmsnorm" in r.stderr


def test_unknown_shape_set_is_one_line(tmp_path):
    r = ablate("operators.shapes.eval=huge", f"store={tmp_path}", timeout=120)
    assert r.returncode == 2 and "no shape set 'huge'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_multirun_arms_as_separate_jobs_pair_up_in_analysis(tmp_path):
    r = ablate("-m", "+harness=goal_only,kda05", "+model=scripted", "study.seeds=[0]", f"store={tmp_path}", timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = records(tmp_path / "smoke")
    assert sorted(x["arm"] for x in recs) == ["goal_only", "kda05"]
    assert recs[0]["match_key"] == recs[1]["match_key"]
    out = subprocess.run([sys.executable, "-m", "ablate.analysis", str(tmp_path / "smoke")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "kda05 / goal_only" in out.stdout
    assert " 1 " in out.stdout.split("kda05 / goal_only")[1].splitlines()[0]  # one matched pair


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    command = readme.split("## Run the tests")[1].split("```bash\n")[1].split("\n")[0]
    assert command in (ROOT / ".ci/run").read_text().splitlines()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ctrl_c_is_one_line_saying_what_is_stored_and_that_the_same_command_resumes(tmp_path):
    """A study of hundreds of trials is stopped by hand: one line, not a traceback; the trials that
    ended stay stored, and the one cut short is kept (what it paid for) under .incomplete."""
    import signal
    import time

    e = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    # SIGINT back to its default: a test run started in the background (`cmd &`) hands its children
    # SIGINT ignored, and Python then installs no Ctrl-C handler
    proc = subprocess.Popen([sys.executable, "-m", "ablate", f"store={tmp_path}"], cwd=ROOT, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 1200
    while not list((tmp_path / "smoke").glob("*/record.json")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.5)
    time.sleep(3)  # into the second trial
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last == (f"interrupted: 1 trial(s) of this study stored in {tmp_path}/smoke, a trial cut short is kept "
                    f"under {tmp_path}/smoke/.incomplete; the same command resumes")
    assert len(records(tmp_path / "smoke")) == 1
    kept = list((tmp_path / "smoke" / ".incomplete").glob("*/*/incomplete.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["failure"]["cause"] == "interrupted"
