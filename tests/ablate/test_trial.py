"""One trial: its id, what it streams while it runs, the operator resolving from its record alone,
and failures that are not the agent's kept apart (never a record, never a rejected kernel)."""
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ablate import operators
from ablate import runner
from ablate.evaluate import EvaluatorFailure
from ablate.models import ProviderOutage
from ablate.record import TrialRecord
from ablate.store import Store, read_records
from ablate import trial as trial_mod
from ablate.trial import TrialSpec, run_trial

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "operators" / "data"


def cfg(actions=(), seeds=(0,), operators_node=None, model=None):
    model = model or {"name": "scripted", "provider": "scripted", "id": "scripted-actions-v1", "policy": "actions",
                      "actions": list(actions)}
    return {"study": {"name": "t", "seeds": list(seeds), "arms": {"goal_only": {"name": "goal_only", "mechanisms": {}}},
                      "model": model, "baseline_arm": "goal_only"},
            "operators": operators_node or {"names": ["rmsnorm"], "shapes": {"public": "smoke", "eval": "smoke"}},
            "budget": {"turns": 12}, "sandbox": {"confinement": "bwrap"}, "parallel": "auto", "retries": 0}


def spec(**kw) -> TrialSpec:
    [s] = runner.plan(cfg(**kw))
    return s


def test_trial_id_comes_from_match_key_arm_and_seed_and_is_stable_across_processes():
    a = spec()
    assert replace(a, arm="kda05").trial_id != a.trial_id
    assert replace(a, seed=1).trial_id != a.trial_id
    assert replace(a, budget={"turns": 13}).trial_id != a.trial_id  # the match key changed
    assert replace(a, harness={"name": "goal_only", "mechanisms": {"x": {}}}).trial_id == a.trial_id  # not in the id
    assert a.match_key[:8] in a.trial_id and "goal_only" in a.trial_id and "s0" in a.trial_id
    code = ("import json, sys; from ablate.trial import TrialSpec; "
            "print(TrialSpec(**json.loads(sys.argv[1])).trial_id)")
    from dataclasses import asdict

    other = subprocess.run([sys.executable, "-c", code, json.dumps(asdict(a))], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert other.stdout.strip() == a.trial_id, other.stderr


def test_model_calls_and_transcript_reach_the_disk_as_they_happen(tmp_path):
    s = spec(actions=[{"tool": "bash", "args": {"command": "echo one"}}, {"tool": "bash", "args": {"command": "echo two"}}])
    store = Store(tmp_path / "store")
    seen = []

    def progress(result):
        [tmp] = list((store.root / "t").glob(".tmp-*"))
        calls = (tmp / "model_calls.jsonl").read_text().splitlines()
        transcript = (tmp / "transcript.jsonl").read_text().splitlines()
        seen.append((result.turns, len(calls), len(transcript), len(result.messages)))

    path = run_trial(s, store, progress=progress)
    assert seen and all(turns == calls and lines == messages for turns, calls, lines, messages in seen)
    assert [t for t, *_ in seen] == list(range(1, len(seen) + 1))
    rec = TrialRecord.from_dict(json.loads((path / "record.json").read_text()), path=path)
    assert len((path / "model_calls.jsonl").read_text().splitlines()) == rec.usage["calls"]
    transcript = [json.loads(line) for line in (path / "transcript.jsonl").read_text().splitlines()]
    assert len(transcript) >= seen[-1][3] and transcript[0]["role"] == "user"  # complete at the end
    log = (path / "trial.log").read_text()
    assert "turn 1:" in log and "agent ended: model_stopped" in log and "verdict: rejected no_submission" in log
    assert not list((store.root / "t").glob(".tmp-*"))


@pytest.mark.parametrize("node,name,loader", [
    ({"source": "kernelbench", "path": str(DATA / "kernelbench"), "level": 1, "names": [],
      "shapes": {"public": "public", "eval": "eval"}, "external_baselines": {}}, "kernelbench/3_Log",
     "ablate.operators.kernelbench:from_file"),
    ({"source": "flashinfer", "path": str(DATA / "flashinfer"), "names": [],
      "shapes": {"public": "public", "eval": "eval"}, "external_baselines": {}}, "flashinfer/rmsnorm_h128",
     "ablate.operators.flashinfer:from_definition"),
])
def test_an_external_operator_resolves_from_its_record_alone_and_loads_once(tmp_path, monkeypatch, node, name, loader):
    specs = [s for s in runner.plan(cfg(operators_node=node)) if s.operator == name]
    assert specs[0].operator_set["names"] == [name.split("/", 1)[1]]  # its own node, not the whole set
    module, fn = loader.split(":")
    loads = []
    real = getattr(importlib.import_module(module), fn)
    monkeypatch.setattr(importlib.import_module(module), fn, lambda *a, **k: loads.append(1) or real(*a, **k))
    operators._resolve.cache_clear()
    path = run_trial(specs[0], Store(tmp_path / "store"))
    for _ in range(3):
        operators.resolve(name, specs[0].operator_set)
    assert len(loads) == 1  # the trial's process loads its operator once
    # another process, knowing nothing but the record
    code = ("import json, sys, operators; from ablate.record import TrialRecord; "
            "r = TrialRecord.from_dict(json.load(open(sys.argv[1]))); op = r.resolve_operator(); "
            "print(op.name, op.name in operators.names(), len(op.shapes['eval']))")
    out = subprocess.run([sys.executable, "-c", code, str(path / "record.json")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    resolved, registered, shapes = out.stdout.split()
    assert resolved == name and registered == "False" and int(shapes) >= 1
    rec = read_records(path)[0]
    assert rec.operator_files == trial_mod.operator_files(rec.resolve_operator())


# The provider tests' local HTTP server speaking the Messages API (one helper, not a copy of it).
_conftest = importlib.util.spec_from_file_location("ablate_models_conftest", ROOT / "tests/ablate/models/conftest.py")
models_conftest = sys.modules.setdefault("ablate_models_conftest", importlib.util.module_from_spec(_conftest))
_conftest.loader.exec_module(models_conftest)


def _anthropic(server, monkeypatch, max_retries=2):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    return {"provider": "anthropic", "name": "fable-5.1", "id": "claude-fable-5-1", "max_tokens": 512,
            "temperature": None, "thinking_budget": 0, "seed": None, "base_url": server.url,
            "price_per_mtok": {"input": 10.0, "output": 50.0, "cache_read": 1.0, "cache_write": 12.5},
            "max_retries": max_retries, "retry_base_s": 0.001, "timeout_s": 5}


def _message(text="Thinking about it."):
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-fable-5-1",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}


def _error(status):
    kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": kind}}


def test_api_429_529_5xx_and_timeouts_are_retried_and_recorded(tmp_path, monkeypatch):
    server = models_conftest.FakeServer()
    try:
        for status in (429, 529):
            server.reply(status, _error(status), headers={"retry-after": "0"})
        server.reply(200, _message())
        server.reply(503, _error(503))
        server.reply(200, _message(), delay_s=1.5)  # the client gives up after 0.5 s: a timeout
        server.reply(200, _message())
        server.reply(200, _message())
        s = spec(model=_anthropic(server, monkeypatch) | {"timeout_s": 0.5, "max_retries": 3})
        path = run_trial(s, Store(tmp_path / "store"))
    finally:
        server.close()
    rec = read_records(path)[0]
    assert rec.end_reason == "model_stopped" and rec.usage["calls"] == 3
    assert rec.model["attempts"] == 7 and rec.model["retries"] == 4
    log = (path / "trial.log").read_text()
    assert "429 rate_limit_error" in log and "529 overloaded_error" in log and "503" in log
    assert log.count("retry ") == 4


def test_an_api_outage_keeps_what_was_paid_and_is_an_infrastructure_failure(tmp_path, monkeypatch):
    server = models_conftest.FakeServer()
    try:
        server.reply(200, _message())
        for _ in range(3):
            server.reply(529, _error(529))
        s = spec(model=_anthropic(server, monkeypatch))
        store = Store(tmp_path / "store")
        with pytest.raises(ProviderOutage, match="gave up after 3 attempts"):
            run_trial(s, store)
    finally:
        server.close()
    assert not store.exists("t", s.trial_id) and read_records(store.root) == []
    [failure] = store.failures("t", s.trial_id)
    assert failure["kind"] == "infrastructure" and failure["cause"] == "api_outage"
    [attempt] = (store.root / "t" / ".incomplete" / s.trial_id).iterdir()
    info = json.loads((attempt / "incomplete.json").read_text())
    assert info["paid"]["calls"] == 1 and info["paid"]["cost_usd"] > 0
    paid, failed = [json.loads(line) for line in (attempt / "model_calls.jsonl").read_text().splitlines()]
    assert paid["response"]["usage"]["calls"] == 1  # the reply it paid for
    assert failed["response"] is None and "gave up after 3 attempts" in failed["error"]  # the call the outage ate
    assert [f["error"][:3] for f in failed["failed_attempts"]] == ["529"] * 3


def test_an_evaluator_failure_is_an_infrastructure_failure_not_a_verdict(tmp_path, monkeypatch):
    s = spec(actions=[{"tool": "write_file", "args": {"path": "kernel.py", "content": "def kernel(x, w):\n    return x\n"}}])

    def broken(*a, **k):
        raise EvaluatorFailure("judge process died: segfault in the judge")

    monkeypatch.setattr(trial_mod, "evaluate", broken)
    store = Store(tmp_path / "store")
    with pytest.raises(EvaluatorFailure):
        run_trial(s, store)
    assert store.failures("t", s.trial_id)[0]["cause"] == "evaluator_failure"
    assert read_records(store.root) == []


def test_every_change_of_kernel_py_is_snapshotted_with_the_spend_so_far(tmp_path):
    writes = [f"def kernel(x, w):\n    return x  # version {i}\n" for i in range(3)]
    s = spec(actions=[{"tool": "write_file", "args": {"path": "kernel.py", "content": writes[0]}},
                      {"tool": "bash", "args": {"command": "echo looking"}},  # no change: no snapshot
                      {"tool": "write_file", "args": {"path": "kernel.py", "content": writes[1]}},
                      {"tool": "write_file", "args": {"path": "kernel.py", "content": writes[2]}},
                      {"tool": "submit", "args": {}}])
    path = run_trial(s, Store(tmp_path / "store"))
    rec = TrialRecord.from_dict(json.loads((path / "record.json").read_text()), path=path)
    taken = rec.snapshots["taken"]
    assert [t["turn"] for t in taken] == [1, 3, 4]
    assert taken[0]["tokens"] < taken[1]["tokens"] < taken[2]["tokens"] <= rec.usage["total_tokens"]
    assert [(path / "snapshots" / t["file"]).read_text() for t in taken] == writes
    assert rec.snapshots["not_kept"] == {} and not (path / "workspace" / "snapshots").exists()  # out of the agent's reach


def test_a_trial_claims_its_gpu_and_says_so_in_its_environment(tmp_path, monkeypatch):
    import os

    from ablate import trial as trial_mod
    from ablate.evaluate import _gpu

    assert trial_mod.claim_gpu({"gpu": None}, "t", print) is None  # no GPU: nothing to hold
    monkeypatch.setattr(_gpu.DeviceLock, "for_current_device", classmethod(lambda cls: cls("GPU-x", str(tmp_path))))
    env = {"gpu": "NVIDIA H200"}
    lock = trial_mod.claim_gpu(env, "t", print)
    assert env["gpu_lock"] == "held" and lock.fd is not None
    assert open(lock.path).read() == f"pid {os.getpid()} (trial t)"
    lock.release()
    monkeypatch.setattr(_gpu.DeviceLock, "for_current_device",
                        classmethod(lambda cls: cls("GPU-x", str(tmp_path / "missing"))))
    env, lines = {"gpu": "NVIDIA H200"}, []
    assert trial_mod.claim_gpu(env, "t", lines.append) is None
    assert env["gpu_lock"].startswith("unavailable") and "nothing keeps other runs off this GPU" in lines[-1]
