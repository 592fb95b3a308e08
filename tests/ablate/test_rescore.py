"""`python -m ablate.rescore`: stored submissions judged again without any agent, the new evaluation
beside the original, and readers choosing which one."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ablate.evaluate
from ablate import rescore as rescore_mod
from ablate import runner
from ablate.store import Store, read_records
from ablate.trial import run_trial

ROOT = Path(__file__).resolve().parents[2]
V1 = Path(__file__).parent / "data" / "store-v1" / "default"
V1_ID = "rmsnorm--goal_only--scripted--s0--47e47fac"


@pytest.fixture
def study(tmp_path) -> Path:
    dest = tmp_path / "store" / "default"
    shutil.copytree(V1, dest)
    return dest


def test_the_cli_judges_again_and_keeps_the_original(study):
    original = (study / V1_ID / "evaluation.json").read_bytes()
    out = subprocess.run([sys.executable, "-m", "ablate.rescore", str(study)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"[1/1] {V1_ID}: accepted" in out.stdout and "(was accepted" in out.stdout
    assert "rescored 1, skipped 0, failed 0" in out.stdout
    [stored] = (study / V1_ID / "evaluations").glob("*.json")
    entry = json.loads(stored.read_text())
    assert entry["device"] == "cpu" and entry["shape_set"] == "smoke" and entry["original"]["verdict"] == "accepted"
    assert (study / V1_ID / "evaluation.json").read_bytes() == original
    latest, first = read_records(study)[0], read_records(study, evaluation="original")[0]
    assert latest.evaluation_source == stored.stem and first.evaluation_source == "original"
    assert latest.evaluation["seed"] != first.evaluation["seed"]  # judged afresh, on new hidden inputs
    assert latest.evaluation["submission_sha256"] == first.evaluation["submission_sha256"]  # the same kernel


def test_a_version_already_rescored_here_is_skipped_unless_forced(study, monkeypatch):
    monkeypatch.setattr(ablate.evaluate, "EVALUATOR_VERSION", "test-7", raising=False)
    calls = []
    monkeypatch.setattr(rescore_mod, "rescore_one", lambda rec, shapes, env, version: calls.append(rec.trial_id) or {
        "evaluation": {"verdict": "accepted", "evaluator_version": version}, "evaluator_version": version,
        "device": env["gpu"] or "cpu", "shape_set": shapes, "environment": env, "rescored_at": "2026-12-02T00:00:00",
        "operator_changed": False, "original": {}})
    assert rescore_mod.rescore(study, log=lambda *a: None) == (1, 0, [])
    assert rescore_mod.rescore(study, log=lambda *a: None) == (0, 1, [])
    assert rescore_mod.rescore(study, force=True, log=lambda *a: None) == (1, 0, [])
    assert calls == [V1_ID, V1_ID]
    [rec] = read_records(study, evaluation="test-7")
    assert rec.evaluation["evaluator_version"] == "test-7" and len(rec.rescorings) == 2


def test_a_trial_without_a_submission_is_rejected_again_so_it_still_counts(study, monkeypatch):
    monkeypatch.setattr(ablate.evaluate, "EVALUATOR_VERSION", "test-8", raising=False)
    (study / V1_ID / "kernel.py").unlink()
    assert rescore_mod.rescore(study, log=lambda *a: None) == (1, 0, [])
    [rec] = read_records(study, evaluation="test-8")  # present under the new version, not left out
    assert rec.verdict == "rejected" and rec.evaluation["reasons"] == ["no_submission"]


def test_an_evaluator_failure_is_reported_and_the_others_are_rescored(study, monkeypatch):
    other = study / "other-trial"
    shutil.copytree(study / V1_ID, other)
    rec = json.loads((other / "record.json").read_text())
    (other / "record.json").write_text(json.dumps(rec | {"trial_id": "other-trial", "seed": 1}))
    real = rescore_mod.rescore_one

    def flaky(rec, shapes, env, version):
        if rec.trial_id == "other-trial":
            raise ablate.evaluate.EvaluatorFailure("judge did not answer within 3600 s")
        return real(rec, shapes, env, version)

    monkeypatch.setattr(rescore_mod, "rescore_one", flaky)
    lines = []
    judged, skipped, failed = rescore_mod.rescore(study, log=lines.append)
    assert (judged, skipped) == (1, 0) and failed == [("other-trial", "judge did not answer within 3600 s")]
    assert not (other / "evaluations").exists()  # nothing half-stored for it
    assert any("other-trial: not rescored: judge did not answer" in line for line in lines)


def test_a_kernelbench_trial_is_rescored_from_its_record_and_a_changed_problem_is_flagged(tmp_path):
    data = tmp_path / "kb"
    shutil.copytree(ROOT / "tests/operators/data/kernelbench", data)
    node = {"source": "kernelbench", "path": str(data), "level": 1, "names": ["3_Log"],
            "shapes": {"public": "public", "eval": "eval"}, "external_baselines": {}}
    kernel = "import torch\n\ndef kernel(x):\n    return torch.log(x)\n"
    model = {"name": "scripted", "provider": "scripted", "id": "scripted-actions-v1", "policy": "actions",
             "actions": [{"tool": "write_file", "args": {"path": "kernel.py", "content": kernel}}]}
    cfg = {"study": {"name": "kb", "seeds": [0], "arms": {"goal_only": {"name": "goal_only", "mechanisms": {}}},
                     "model": model}, "operators": node, "budget": {"turns": 5},
           "sandbox": {"confinement": "bwrap"}, "parallel": "auto"}
    [spec] = runner.plan(cfg)
    path = run_trial(spec, Store(tmp_path / "store"))
    problem = data / "KernelBench" / "level1" / "3_Log.py"
    problem.write_text(problem.read_text() + "\n# edited after the trial\n")
    lines = []
    assert rescore_mod.rescore(path, log=lines.append)[0] == 1
    [rec] = read_records(path)
    assert rec.evaluation["operator"] == "kernelbench/3_Log" and rec.evaluation_source != "original"
    assert rec.evaluation["verdict"] == "rejected" and "library_passthrough" in rec.evaluation["reasons"]
    assert rec.rescorings[0]["operator_changed"] is True
    assert "the operator's files changed since the trial" in lines[-1]


def test_bad_arguments_are_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ablate.rescore", str(tmp_path / "nope")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().startswith("error: ") and len(out.stderr.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    out = subprocess.run([sys.executable, "-m", "ablate.rescore", str(tmp_path / "empty")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no trial records" in out.stderr
