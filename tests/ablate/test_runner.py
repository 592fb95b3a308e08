"""The runner: records survive a failure mid-study, a rerun resumes, the record says how it ended."""
import json
from pathlib import Path

import pytest

import ablate.operators.rmsnorm
from ablate import models, runner
from ablate.errors import AblateError

OPERATOR_SOURCE = Path(ablate.operators.rmsnorm.__file__).resolve()  # the operator as this run imports it


def cfg(tmp_path, actions=(), seeds=(0, 1)):
    model = {"name": "scripted", "provider": "scripted", "id": "scripted-actions-v1", "policy": "actions",
             "actions": list(actions)}
    return {"study": {"name": "t", "seeds": list(seeds), "arms": {"goal_only": {"name": "goal_only", "mechanisms": {}}},
                      "model": model, "baseline_arm": "goal_only"},
            "operators": {"names": ["rmsnorm"], "shapes": {"public": "smoke", "eval": "smoke"}},
            "budget": {"turns": 12}, "sandbox": {"confinement": "bwrap"}, "parallel": "auto"}


def test_a_failure_mid_study_keeps_earlier_records_and_a_rerun_resumes(tmp_path, monkeypatch):
    real_get, calls = models.get, []

    def flaky(model_cfg):
        calls.append(1)
        if len(calls) == 2:
            raise AblateError("replay diverged at call 1")
        return real_get(model_cfg)

    monkeypatch.setattr(models, "get", flaky)
    with pytest.raises(AblateError, match="diverged"):
        runner.run_study(cfg(tmp_path), tmp_path / "store", log=lambda *a: None)
    done = list((tmp_path / "store" / "t").glob("*/record.json"))
    assert len(done) == 1
    assert not [p for p in (tmp_path / "store" / "t").iterdir() if p.name.startswith(".tmp-")]  # nothing half-written
    lines = []
    runner.run_study(cfg(tmp_path), tmp_path / "store", log=lines.append)
    assert lines[0].startswith("resuming: 1 of 2 trials")
    assert len(list((tmp_path / "store" / "t").glob("*/record.json"))) == 2


def test_no_submission_is_recorded_as_such(tmp_path):
    [path] = runner.run_study(cfg(tmp_path, seeds=(0,)), tmp_path / "store", log=lambda *a: None)
    rec = json.loads((path / "record.json").read_text())
    assert rec["end_reason"] == "model_stopped" and rec["verdict"] == "rejected"
    assert rec["evaluation"]["reasons"] == ["no_submission"]
    assert rec["sandbox"]["confinement"] == "bwrap"
    assert str((tmp_path / "store").resolve()) in rec["sandbox"]["hidden"]  # kept out wherever it lies


def test_sandbox_attempts_end_cleanly_and_the_record_shows_them(tmp_path):
    """An agent that tries to escape: network, reading the project, killing its parent, a fork bomb."""
    attacks = [
        {"tool": "bash", "args": {"command": "python -c \"import socket; socket.create_connection(('127.0.0.1', 22), 2)\""}},
        {"tool": "bash", "args": {"command": f"cat {OPERATOR_SOURCE} || ls ~/../"}},
        {"tool": "bash", "args": {"command": "kill -9 $PPID; pkill -9 python; echo still-here"}},
        {"tool": "bash", "args": {"command": "sleep 100", "timeout_s": 1}},
    ]
    [path] = runner.run_study(cfg(tmp_path, attacks, seeds=(0,)), tmp_path / "store", log=lambda *a: None)
    transcript = [json.loads(line) for line in (path / "transcript.jsonl").read_text().splitlines()]
    results = [m["content"] for m in transcript if m["role"] == "tool"]
    assert "Network is unreachable" in results[0] or "refused" in results[0] or "Errno" in results[0]
    assert "EPS" in OPERATOR_SOURCE.read_text()  # the file the agent aims at holds it
    assert "EPS" not in results[1] and "No such file or directory" in results[1]  # out of reach
    assert "timed out" in results[3]
    rec = json.loads((path / "record.json").read_text())
    assert rec["end_reason"] == "model_stopped"  # the runner survived every attempt and finished the trial


def test_too_many_gpus_is_a_clear_error():
    with pytest.raises(AblateError, match="GPU"):
        runner.gpu_slots(64)


def test_parallel_slots_run_each_trial_in_its_own_process(tmp_path):
    """The multi-GPU path (one trial per GPU, each in a process of its own), with two CPU slots."""
    from ablate.store import Store

    specs = runner.plan(cfg(tmp_path))
    lines = []
    paths = runner._run_parallel(specs, Store(tmp_path / "store"), [None, None], lines.append)
    assert len(paths) == 2 and all((p / "record.json").is_file() for p in paths)
    assert {json.loads((p / "record.json").read_text())["seed"] for p in paths} == {0, 1}
    assert sum("rejected (no_submission)" in line for line in lines) == 2


# --- resume, retries, slots, progress ------------------------------------------------------------

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from ablate.models import ProviderOutage  # noqa: E402
from ablate.progress import StudyView  # noqa: E402
from ablate.store import Store, read_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SLEEP = [{"tool": "bash", "args": {"command": "sleep 3"}}]


def _wait(predicate, timeout=120.0, what="the condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _mid_trial(study: Path):
    """A temporary trial directory with at least one streamed model call and no record yet (a trial
    under way, not one between writing its record and the rename that commits it)."""
    for tmp in study.glob(".tmp-*"):
        calls = tmp / "model_calls.jsonl"
        if calls.is_file() and calls.read_text().count("\n") >= 1 and not (tmp / "record.json").exists():
            return tmp
    return None


def _committed(study: Path) -> list[Path]:
    """The records of committed trials (pathlib's glob also matches the hidden temporary ones)."""
    return [p for p in study.glob("*/record.json") if not p.parent.name.startswith(".")]


def test_kill_9_of_the_runner_loses_no_finished_record_and_the_next_run_resumes(tmp_path):
    c = cfg(tmp_path, SLEEP)
    study = tmp_path / "store" / "t"
    code = "import json, sys; from ablate import runner; runner.run_study(json.loads(sys.argv[1]), sys.argv[2])"
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(c), str(tmp_path / "store")], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _committed(study) and _mid_trial(study), what="one record and a second trial")
        first = _committed(study)[0].read_bytes()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    assert [json.loads(first)["seed"]] == [r.seed for r in read_records(study)]  # intact, and the only one
    lines = []
    runner.run_study(c, tmp_path / "store", log=lines.append)
    assert any(line.startswith("kept the attempt of a run that died") for line in lines)
    assert any(line.startswith("resuming: 1 of 2 trials") for line in lines)
    recs = {r.seed: r for r in read_records(study)}
    assert set(recs) == {0, 1} and recs[0].to_dict() == TrialRecordFrom(first).to_dict()
    second = [r for r in recs.values() if r.attempt == 2]
    assert len(second) == 1 and second[0].failures[0]["cause"] == "node_lost"
    [kept] = (study / ".incomplete" / second[0].trial_id).iterdir()
    assert (kept / "model_calls.jsonl").read_text().count("\n") >= 1  # the killed attempt's paid calls


def TrialRecordFrom(raw: bytes):
    from ablate.record import TrialRecord

    return TrialRecord.from_dict(json.loads(raw))


def test_an_infrastructure_failure_is_retried_and_recorded_never_a_rejected_kernel(tmp_path, monkeypatch):
    calls = {"n": 0}
    real_get = models.get

    def flaky(model_cfg):
        calls["n"] += 1
        model = real_get(model_cfg)
        if calls["n"] == 1:  # the first attempt's model: the API is down for good
            def down(*a):
                raise ProviderOutage("anthropic: gave up after 7 attempts; last error: 529 overloaded_error")
            model.generate = down
        return model

    monkeypatch.setattr(models, "get", flaky)
    lines = []
    c = dict(cfg(tmp_path, seeds=(0,)), retries=1, retry_delay_s=0)
    [path] = runner.run_study(c, tmp_path / "store", log=lines.append)
    [rec] = read_records(path)
    assert rec.attempt == 2 and [f["cause"] for f in rec.failures] == ["api_outage"]
    assert rec.verdict == "rejected" and rec.evaluation["reasons"] == ["no_submission"]  # the agent's own outcome
    assert any("attempt 1 failed (infrastructure: api_outage)" in line and "trying again" in line for line in lines)


def test_a_trial_failing_every_attempt_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    from ablate import trial as trial_mod
    from ablate.evaluate import EvaluatorFailure

    real_evaluate = trial_mod.evaluate

    def evaluate(spec, path, shapes, progress=None):
        if spec.seed == 0:  # the evaluator breaks on this trial's machine, every time
            raise EvaluatorFailure("judge process died: segfault")
        return real_evaluate(spec, path, shapes, progress)

    monkeypatch.setattr(trial_mod, "evaluate", evaluate)
    write = [{"tool": "write_file", "args": {"path": "kernel.py", "content": "def kernel(x, w, eps=1e-6):\n    return x\n"}}]
    c = dict(cfg(tmp_path, write), retries=1, retry_delay_s=0)
    with pytest.raises(runner.TrialsFailed, match=r"1 trial\(s\) failed on all 2 attempts \(infrastructure: evaluator_failure x1\)") as e:
        runner.run_study(c, tmp_path / "store", log=lambda *a: None)
    assert len(e.value.paths) == 1
    recs = read_records(tmp_path / "store" / "t")
    assert [r.seed for r in recs] == [1]  # no record, hence no rejected kernel, for the failed trial
    assert recs[0].verdict == "rejected" and "incorrect" in recs[0].evaluation["reasons"]  # judged for real
    from ablate.analysis import tables

    assert list(tables.trials(tmp_path / "store" / "t")["seed"]) == [1]
    [failed] = e.value.failures
    assert len(Store(tmp_path / "store").failures("t", failed)) == 2


def test_one_trial_per_slot_at_a_time_and_a_lost_trial_process_is_retried(tmp_path):
    """Three trials on two slots ("0", "1": CUDA_VISIBLE_DEVICES of each trial process); the first
    trial process is killed with SIGKILL mid-trial, like a lost node, and runs again."""
    c = dict(cfg(tmp_path, SLEEP, seeds=(0, 1, 2)), retries=1, retry_delay_s=0)
    study = tmp_path / "store" / "t"
    killed = []

    def killer():
        tmp = _wait(lambda: _mid_trial(study), what="a trial under way")
        owner = json.loads((tmp / "owner.json").read_text())
        os.kill(owner["pid"], signal.SIGKILL)
        killed.append(owner["trial_id"])

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    specs = runner.plan(c)
    lines = []
    view = StudyView(len(specs), 0, 2, lines.append, live=False)
    paths = runner._run_parallel(specs, Store(tmp_path / "store"), ["0", "1"], lines.append, view, retries=1)
    t.join(5)
    recs = read_records(study)
    assert len(paths) == 3 and len(recs) == 3 and killed
    [again] = [r for r in recs if r.trial_id == killed[0]]
    assert again.attempt == 2 and again.failures[0]["cause"] == "node_lost"
    assert any("killed by signal 9" in line and "trying again" in line for line in lines)
    by_slot = {}
    for r in recs:
        by_slot.setdefault(r.environment["cuda_visible_devices"], []).append((r.started_at, r.finished_at))
    assert set(by_slot) == {"0", "1"}
    for spans in by_slot.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans  # never two at once on one slot


def test_progress_shows_done_running_failed_tokens_cost_and_time_left():
    lines = []
    view = StudyView(total=10, already=2, slots=2, log=lines.append, live=False)
    view.start("a", "[1/8] rmsnorm goal_only")
    view.turn("a", 3, 1200, 0.25)
    view.start("b", "[2/8] rmsnorm kda05")
    assert "2/10 done, 2 running, 0 failed; 1,200 tokens, $0.25" in view.summary() and "~? left" in view.summary()
    view.durations = [60.0]  # as if one trial had taken a minute
    view.running["a"].started -= 60
    view.finish("a", "[1/8] rmsnorm goal_only: submitted, accepted", 1500, 0.30)
    view.attempt_failed("b", "[2/8] rmsnorm kda05: attempt 1 failed", retrying=False)
    assert view.done == 1 and view.failed == 1
    # 6 trials left on 2 slots at about a minute each: 3 minutes
    assert lines[-1].endswith("3/10 done, 0 running, 1 failed; 1,500 tokens, $0.30; elapsed 0s, ~3m00s left]")
    from rich.console import Console

    view.start("c", "[3/8] softmax goal_only")
    console = Console(width=120, record=True, file=open(os.devnull, "w"))
    console.print(view._render())
    text = console.export_text()
    assert "softmax goal_only" in text and "3/10 done" in text and "running" in text


def test_a_terminal_gets_the_live_view_and_a_pipe_gets_plain_lines(tmp_path):
    code = ("import json, sys; from ablate import runner; "
            "runner.run_study(json.loads(sys.argv[1]), sys.argv[2], live=sys.argv[3] == 'live')")
    c = json.dumps(cfg(tmp_path, seeds=(0,)))
    plain = subprocess.run([sys.executable, "-c", code, c, str(tmp_path / "a"), "auto"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert "[1/1] rmsnorm goal_only scripted seed=0 ..." in plain.stdout and "1/1 done" in plain.stdout
    assert "\x1b[" not in plain.stdout + plain.stderr  # no terminal codes in a log
    live = subprocess.run([sys.executable, "-c", code, c, str(tmp_path / "b"), "live"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "FORCE_COLOR": "1"})
    assert live.returncode == 0, live.stderr
    assert "1/1 done, 0 running, 0 failed" in live.stderr  # the view's last word


def test_only_one_trial_runs_for_a_sweep_job(tmp_path):
    c = cfg(tmp_path)
    second = runner.plan(c)[1]
    [path] = runner.run_study(c, tmp_path / "store", log=lambda *a: None, only=second.trial_id)
    assert path.name == second.trial_id and len(read_records(tmp_path / "store")) == 1
    lines = []
    assert runner.run_study(c, tmp_path / "store", log=lines.append, only=second.trial_id) == [path]
    assert lines == [f"{second.trial_id}: already stored in {path}"]
    with pytest.raises(AblateError, match="no trial 'nope' in study 't'"):
        runner.run_study(c, tmp_path / "store", only="nope")


def test_planning_reports_a_trial_directory_without_its_record_and_leaves_it(tmp_path):
    c = cfg(tmp_path)
    broken = Store(tmp_path / "store").trial_dir("t", runner.plan(c)[0].trial_id)
    (broken / "workspace").mkdir(parents=True)
    lines = []
    specs, todo = runner.pending(c, tmp_path / "store", log=lines.append)
    assert len(specs) == 2 and [s.seed for s in todo] == [1]
    assert lines == [f"skipped {broken}: no record.json (move the directory away to rerun it)"]


def test_kill_9_of_a_parallel_runner_takes_its_trial_processes_with_it(tmp_path):
    """Trials in processes of their own must not run on after the runner is killed: a rerun would
    start them again and pay twice."""
    c = cfg(tmp_path, [{"tool": "bash", "args": {"command": "sleep 30"}}])
    study = tmp_path / "store" / "t"
    code = ("import json, sys; from ablate import runner; from ablate.store import Store; "
            "c = json.loads(sys.argv[1]); runner._run_parallel(runner.plan(c), Store(sys.argv[2]), [None, None], print)")
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(c), str(tmp_path / "store")], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: len([t for t in study.glob(".tmp-*") if (t / "model_calls.jsonl").is_file()]) == 2,
              what="two trial processes under way")
        pids = [json.loads((t / "owner.json").read_text())["pid"] for t in study.glob(".tmp-*")]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()

    def gone():
        return all(not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
                   for pid in pids)

    _wait(gone, timeout=20, what="the trial processes to end")
    assert len(Store(tmp_path / "store").clean_stale("t")) == 2  # both attempts kept, as a dead run's


# --- the plan before a run, the report after it -------------------------------------------------


def test_a_dry_run_counts_what_is_planned_and_stored_and_writes_nothing(tmp_path):
    from ablate import dry_run

    c = dict(cfg(tmp_path), store=str(tmp_path / "store"))
    before = dry_run.text(c)
    assert "multi_shape: 1 operator x 1 shape set ('smoke' shown, 'smoke' judged) x 2 seeds x 1 arm = 2 trials" in before
    assert f"2 planned, 0 already stored in {tmp_path / 'store'}/t, 2 to run" in before
    assert "model cost: $0" in before
    assert not (tmp_path / "store").exists()  # planning wrote nothing
    runner.run_study(c, tmp_path / "store", log=lambda *a: None, only=runner.plan(c)[0].trial_id)
    after = dry_run.text(c)
    assert "2 planned, 1 already stored" in after and "1 to run" in after
    assert len(list((tmp_path / "store" / "t").glob("*/record.json"))) == 1


def test_the_dry_runs_time_rests_on_the_budget_and_on_measured_trials():
    from ablate import dry_run

    class Spec:
        shapes = {"public": "public", "eval": "eval"}

    c = {"budget": {"wall_s": 1200}, "study": {"model": {"provider": "anthropic"}}, "parallel": "auto"}
    lines = dry_run.time_lines(c, [Spec()] * 3, ["0", "1", "2"], gpu=True)
    assert any("at most 20m00s (3 x budget.wall_s 1200 s / 3 GPUs)" in x for x in lines), lines
    assert any("no trial of an API model has been measured" in x for x in lines)
    c["study"]["model"] = {"provider": "scripted"}
    lines = dry_run.time_lines(c, [Spec()] * 10, [None], gpu=False)
    assert any(x.startswith("  on one H200: about 10m30s (10 x 63 s") and "h200-study" in x for x in lines), lines
    assert any("not measured for the scripted policy on public/eval shapes" in x for x in lines)


def test_the_dry_runs_model_cost_is_the_budgets_ceiling_at_the_models_prices(monkeypatch):
    from ablate import dry_run

    monkeypatch.delenv("SOME_KEY", raising=False)
    model = {"name": "m", "provider": "anthropic", "api_key_env": "SOME_KEY",
             "price_per_mtok": {"input": 10.0, "output": 50.0, "cache_read": 0.25, "cache_write": 12.5}}
    c = {"model": model, "study": {}, "budget": {"tokens": 400_000, "cost_usd": 50.0}}
    lines = dry_run.cost_lines(c, 10)
    assert lines[0].startswith("model cost: at most $200 (10 trials x $20.00, budget.tokens 400,000 at the dearest "
                               "rate of m, $50 per million tokens"), lines
    assert "not a forecast" in lines[1] and lines[2] == "  note: SOME_KEY is not set: a run would stop before its first trial"
    c["budget"] = {"tokens": 400_000, "cost_usd": 5.0}
    assert dry_run.cost_lines(c, 10)[0].startswith("model cost: at most $50.00 (10 trials x $5.00, budget.cost_usd")
    c["budget"] = {"tokens": None, "cost_usd": None}
    assert dry_run.cost_lines(c, 10)[0].startswith("model cost: unbounded")
    monkeypatch.setenv("SOME_KEY", "k")
    assert not any("SOME_KEY" in x for x in dry_run.cost_lines(c, 10))
    c["model"] = {"name": "scripted", "provider": "scripted"}
    assert dry_run.cost_lines(c, 10) == ["model cost: $0 (the scripted policy and replayed calls use no API)"]


def test_a_study_ends_with_its_reports_path_and_the_command_that_writes_it_again(tmp_path, capsys):
    c = dict(cfg(tmp_path, seeds=(0,)), analysis={"rejected_as": 1.0})
    paths = runner.run_study(c, tmp_path / "store", log=lambda *a: None)
    capsys.readouterr()
    study = tmp_path / "store" / "t"
    runner.print_report(study, c, paths)
    out = capsys.readouterr().out.strip().splitlines()
    assert f"report: {study}/report/index.html (tables: {study}/report/tables.md, CSV in {study}/report/tables)" in out
    assert out[-1] == f"again, from the records alone: python -m ablate.analysis {study} --baseline goal_only"
    assert (study / "report" / "index.html").is_file() and (study / "report" / "tables.md").is_file()


def test_smoke_shapes_on_a_gpu_are_said_to_be_not_comparable():
    smoke = {"operators": {"shapes": {"public": "smoke", "eval": "smoke"}}}
    note = runner.smoke_note(smoke, gpu=True)
    assert note and "not comparable" in note and "operators.shapes.public=public operators.shapes.eval=eval" in note
    assert "\n" not in note
    assert runner.smoke_note(smoke, gpu=False) is None  # the CPU interpreter's timings are labelled already
    assert runner.smoke_note({"operators": {"shapes": {"public": "public", "eval": "eval"}}}, gpu=True) is None
