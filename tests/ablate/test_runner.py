"""The runner: records survive a failure mid-study, a rerun resumes, the record says how it ended."""
import json
from pathlib import Path

import pytest

import operators.rmsnorm
from ablate import models, runner
from ablate.errors import AblateError

OPERATOR_SOURCE = Path(operators.rmsnorm.__file__).resolve()  # the operator as this run imports it


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
