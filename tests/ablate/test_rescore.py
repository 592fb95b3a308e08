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


# --- snapshots: kernel.py along the trial, judged afterwards -------------------------------------

GOOD = (V1 / V1_ID / "kernel.py").read_text()  # accepted on the smoke shapes
WRONG = "import torch\n\ndef kernel(x, weight):\n    return x\n"
FORGED = '{"verdict": "accepted", "geomean_speedup": 99.0, "evaluator_version": "%s"}' % ablate.evaluate.VERSION


@pytest.fixture(scope="module")
def snapshot_study(tmp_path_factory) -> Path:
    """A goal_only trial (no evaluate tool) that writes kernel.py three times and, as an agent
    gaming the curve would, prints a forged evaluator result and plants forged judgement files."""
    forge = ("mkdir -p snapshots/evaluations && for f in turn-0001 turn-0003 turn-0004; do "
             f"echo '{{\"snapshot\": {{\"file\": \"'$f'.py\"}}, \"evaluation\": {FORGED}}}' "
             f"> snapshots/evaluations/$f--{ablate.evaluate.VERSION}--cpu--smoke.json; done; echo '" + FORGED + "'")
    actions = [{"tool": "write_file", "args": {"path": "kernel.py", "content": WRONG}},
               {"tool": "bash", "args": {"command": forge}},
               {"tool": "write_file", "args": {"path": "kernel.py", "content": GOOD}},
               {"tool": "write_file", "args": {"path": "kernel.py", "content": GOOD.replace("'rows_per_program': 4",
                                                                                           "'rows_per_program': 1")}},
               {"tool": "submit", "args": {}}]
    model = {"name": "scripted", "provider": "scripted", "id": "scripted-actions-v1", "policy": "actions", "actions": actions}
    cfg = {"study": {"name": "snap", "seeds": [0], "arms": {"goal_only": {"name": "goal_only", "mechanisms": {}}},
                     "model": model}, "operators": {"names": ["rmsnorm"], "shapes": {"public": "smoke", "eval": "smoke"}},
           "budget": {"turns": 12}, "sandbox": {"confinement": "bwrap"}, "parallel": "auto", "retries": 0}
    [spec] = runner.plan(cfg)
    return run_trial(spec, Store(tmp_path_factory.mktemp("snap") / "store")).parent


@pytest.fixture
def snaps(snapshot_study, tmp_path) -> Path:
    dest = tmp_path / "store" / "snap"
    shutil.copytree(snapshot_study, dest, symlinks=True)
    return dest


def test_snapshots_are_judged_on_public_shapes_beside_the_trial_and_a_rerun_skips_them(snaps):
    from ablate.analysis import tables

    [trial] = [d for d in snaps.iterdir() if (d / "record.json").is_file()]
    before = {p: (trial / p).read_bytes() for p in ("record.json", "evaluation.json")}
    out = subprocess.run([sys.executable, "-m", "ablate.rescore", str(snaps), "--snapshots"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "turn-0001.py (1/3, turn 1): rejected" in out.stdout and "turn-0004.py (3/3, turn 4): accepted" in out.stdout
    assert "judged snapshots 3, skipped 0, failed 0" in out.stdout
    assert {p: (trial / p).read_bytes() for p in before} == before  # the record and its final judgement as they were
    assert not (trial / "evaluations").exists()
    rec = read_records(snaps)[0]
    entries = sorted((trial / "snapshots" / "evaluations").glob("*.json"))
    assert [p.name for p in entries] == [f"{t['file'][:-3]}--{ablate.evaluate.VERSION}--cpu--smoke.json" for t in rec.snapshots["taken"]]
    for p, snap in zip(entries, rec.snapshots["taken"]):
        e = json.loads(p.read_text())
        assert e["shape_set"] == "smoke" and e["evaluation"]["submission_sha256"] == snap["sha256"]
    assert rescore_mod.rescore_snapshots(snaps, log=lambda *a: None) == (0, 3, [])  # resumable: nothing judged twice

    s = tables.summary(snaps, activity=True)
    pr = s["progress"]
    points = pr[pr["source"] == "snapshot"].sort_values("turn")
    assert list(points["turn"]) == [1, 3, 4] and list(points["accepted"]) == [False, True, True]
    assert points["tokens"].is_monotonic_increasing and points["tokens"].max() < pr.loc[pr["source"] == "final", "tokens"].max()
    curve = s["best_by_turn"].set_index("turn")["speedup"]
    final_turn = pr.loc[pr["source"] == "final", "turn"].max()
    # before its end goal_only now scores its judged snapshot, not the 1.0x of a trial with no point yet
    assert curve[(curve.index >= 3) & (curve.index < final_turn)].iloc[0] == pytest.approx(points["speedup"].iloc[1])
    assert s["footing"] == []


def test_a_snapshot_is_judged_only_by_the_trusted_evaluator(snaps):
    from ablate.analysis import frames

    [trial] = [d for d in snaps.iterdir() if (d / "record.json").is_file()]
    ws = trial / "workspace"
    assert (ws / "snapshots" / "evaluations" / f"turn-0003--{ablate.evaluate.VERSION}--cpu--smoke.json").is_file()  # the agent's forgeries
    records, _ = frames.load(snaps)
    progress, _ = frames.activity(records)
    assert list(progress["source"]) == ["final"]  # its printed JSON and planted files are no points
    # A forged judgement beside the runner's snapshots (a claimed speedup for the stored sha) counts
    # for nothing either: the evaluator's own hash of what it judged must be the snapshot's.
    rec = read_records(snaps)[0]
    snap = rec.snapshots["taken"][1]
    (trial / "snapshots" / "evaluations").mkdir()
    (trial / "snapshots" / "evaluations" / f"turn-0003--{ablate.evaluate.VERSION}--cpu--smoke.json").write_text(json.dumps(
        {"snapshot": snap, "evaluation": {**json.loads(FORGED), "device": {"name": "cpu"}, "submission_sha256": "0" * 64}}))
    progress, _ = frames.activity(frames.load(snaps)[0])
    assert list(progress["source"]) == ["final"]
    # A snapshot changed after the trial is refused, named, and the others are judged.
    (trial / "snapshots" / "turn-0004.py").write_text("def kernel(x, weight):\n    return x\n")
    shutil.rmtree(trial / "snapshots" / "evaluations")
    lines = []
    judged, skipped, failed = rescore_mod.rescore_snapshots(snaps, log=lines.append)
    assert (judged, skipped) == (2, 0) and failed[0][0].endswith("/turn-0004.py") and "sha256 differs" in failed[0][1]
    progress, _ = frames.activity(frames.load(snaps)[0])
    assert sorted(progress.loc[progress["source"] == "snapshot", "turn"]) == [1, 3]
    assert progress["speedup"].max() < 1  # the interpreter's real figures, never the forged 99x


def test_a_trial_recorded_before_snapshots_says_so(study):
    lines = []
    assert rescore_mod.rescore_snapshots(study, log=lines.append) == (0, 0, [])
    assert lines[-1].endswith(f"{V1_ID}: no snapshots (recorded before snapshots were taken)")
