"""`hydra/launcher=slurm` against a real one-node SLURM (munge, slurmctld, slurmd on this machine).

`bash .ci/slurm.sh` (as root) starts one; CI runs it and sets ABLATE_REQUIRE_SLURM=1, so there a
missing cluster fails these tests instead of skipping them. The sweeps use the offline scripted
model on smoke shapes (Triton's CPU interpreter) and the CPU preset (hydra/launcher=slurm_cpu).
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ablate.store import read_records

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("preset,gpus,cpus", [("slurm", 1, 8), ("slurm_cpu", None, 1)])
def test_launcher_presets_compose_with_the_trial_sweeper(preset, gpus, cpus):
    from hydra import compose, initialize_config_dir

    import ablate.config  # noqa: F401  (registers the schemas the config composes against)

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra/launcher={preset}"], return_hydra_config=True)
    launcher, sweeper = cfg.hydra.launcher, cfg.hydra.sweeper
    assert launcher._target_.endswith("SlurmLauncher") and sweeper._target_.endswith("TrialSweeper")
    assert (launcher.gpus_per_node, launcher.cpus_per_task) == (gpus, cpus)
    assert "partition" in launcher and launcher.timeout_min > 0 and launcher.array_parallelism > 0
    assert launcher.max_num_timeout >= 1 and launcher.additional_parameters.requeue is True
    assert sweeper.max_batch_size <= 1001  # SLURM's default MaxArraySize


def _node_state() -> str:
    if not shutil.which("sinfo"):
        return "no sinfo on PATH"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer"
    return out.stdout.strip() or out.stderr.strip() or "no nodes"


NO_CONTROLLER = "Unable to contact slurm controller"  # sinfo's answer (after about 9 s) where none runs


@pytest.fixture(scope="module")
def slurm():
    required = os.environ.get("ABLATE_REQUIRE_SLURM") == "1"
    deadline = time.monotonic() + 30
    state = _node_state()
    # a node may take a while to be usable; a controller that is not there is waited for only where
    # one is required (CI), not on every machine without SLURM (three more sinfo calls, 30 s)
    while (state not in ("idle", "mixed", "allocated") and time.monotonic() < deadline and shutil.which("sinfo")
           and (required or NO_CONTROLLER not in state)):
        time.sleep(1)
        state = _node_state()
    if state not in ("idle", "mixed", "allocated"):
        why = f"no usable SLURM node ({state}); `bash .ci/slurm.sh` as root starts a one-node cluster"
        if required:
            pytest.fail(why + "; its logs: /var/log/slurm/slurmctld.log, /var/log/slurm/slurmd.log")
        pytest.skip(why)


# limits that hold on two busy cores (a second test run beside this one): a quiet machine takes about a minute
def sweep(store: Path, *overrides: str, wait: bool = True, timeout: float = 900):
    args = [sys.executable, "-m", "ablate", "-m", "hydra/launcher=slurm_cpu", f"store={store}", *overrides]
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    if wait:
        return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_study_is_one_job_array_with_one_trial_per_job(slurm, tmp_path):
    # the default study's two arms on one seed: two jobs show the array as well as its four would
    r = sweep(tmp_path, "study.seeds=[0]")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    recs = read_records(tmp_path / "smoke")
    assert sorted((x.arm, x.seed) for x in recs) == [("goal_only", 0), ("kda05", 0)]
    assert all(x.verdict == "accepted" and x.evaluation["timing"] == "cpu-interpreted" for x in recs)
    jobs = [x.environment["slurm"] for x in recs]
    assert len({j["slurm_array_job_id"] for j in jobs}) == 1  # one array ...
    assert sorted(j["slurm_array_task_id"] for j in jobs) == ["0", "1"]  # ... of one-trial jobs
    assert "kda05 / goal_only" in r.stdout
    assert all((x.path / "trial.log").is_file() for x in recs)
    again = sweep(tmp_path, "study.seeds=[0]")  # every trial stored: nothing is submitted
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2 trials, 0 to run" in again.stdout + again.stderr
    assert len(read_records(tmp_path / "smoke")) == 2


def _under_way(study: Path, calls: int = 1) -> dict[str, dict]:
    """trial id -> owner.json, for temporary trial directories with `calls` model calls streamed."""
    out = {}
    for tmp in study.glob(".tmp-*"):
        try:
            owner = json.loads((tmp / "owner.json").read_text())
            streamed = (tmp / "model_calls.jsonl").read_text().count("\n") if calls else 0
            if streamed >= calls and owner.get("slurm_job"):
                out[owner["trial_id"]] = owner
        except (OSError, ValueError):
            continue
    return out


def _release_held() -> None:
    """SLURM keeps a requeued job pending for its BeginTime (about two minutes); start it now."""
    out = subprocess.run(["squeue", "-h", "-t", "PD", "-o", "%i %r"], capture_output=True, text=True, timeout=20)
    for line in out.stdout.splitlines():
        job, _, reason = line.partition(" ")
        if reason.strip() == "BeginTime":
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True, timeout=20)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_job_killed_mid_trial_is_requeued_and_resumes(slurm, tmp_path):
    """One trial's job is requeued by the scheduler (killed, as on a lost node or a pre-emption);
    the other gets the pre-emption signal, on which submitit checkpoints and requeues it. Both
    reruns find the interrupted attempt, keep it, and run the trial to its record."""
    study = tmp_path / "killed"
    # an agent that pays for a call, then works long enough (a slow command) for its job to be hit
    slow = ("study.model.actions=[{tool:bash,args:{command:'sleep 1'}},{tool:bash,args:{command:"
            "'sleep 15 && cp reference.py kernel.py && echo kernel = reference >> kernel.py'}}]")
    proc = sweep(tmp_path, "+harness=goal_only", "study.name=killed", "study.seeds=[0,1]", "study.model.policy=actions",
                 slow, wait=False)
    kills = [lambda job: ["scontrol", "requeue", job], lambda job: ["scancel", "--signal=USR2", job]]
    killed: list[str] = []  # trial ids, in the order their jobs were hit
    try:
        deadline = time.monotonic() + 900
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"the sweep did not finish (killed: {killed})"
            # the requeue once the attempt has paid for a call (it must be kept); the pre-emption
            # signal as early as possible (submitit handles it between bytecodes, so a trial near
            # its end could finish first)
            for trial_id, owner in _under_way(study, calls=1 if not killed else 0).items():
                if trial_id not in killed and len(killed) < len(kills):
                    subprocess.run(kills[len(killed)](owner["slurm_job"]), check=True, timeout=20)
                    killed.append(trial_id)
            _release_held()
            time.sleep(0.2)
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(killed) == 2, f"a trial finished before its job could be hit: {out[-3000:]}"
    a, b = killed
    assert proc.returncode == 0, out[-4000:]
    recs = {r.trial_id: r for r in read_records(study)}
    assert set(recs) == {a, b}
    for trial_id in (a, b):
        rec = recs[trial_id]
        assert rec.attempt == 2 and rec.environment["slurm"]["slurm_restart_count"] == "1"
        assert rec.verdict == "accepted"  # the rerun did the whole trial
        assert rec.failures[0]["kind"] == "infrastructure"
        [kept] = (study / ".incomplete" / trial_id).iterdir()
        if trial_id == a:  # killed after its first model call: what that attempt paid for is kept
            assert (kept / "model_calls.jsonl").read_text().count("\n") >= 1
    assert recs[a].failures[0]["cause"] == "node_lost"
    assert recs[b].failures[0]["cause"] in ("interrupted", "node_lost")  # killed before or after it wrote why
    assert not list(study.glob(".tmp-*"))
