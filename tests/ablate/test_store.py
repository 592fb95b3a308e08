"""The record store: typed, versioned records; atomic trial directories; streamed attempts kept when
they die; stale temporary directories of dead runs only; a Parquet index rebuilt from the
directories; corrupt directories reported and skipped; the evaluation a reader asks for."""
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ablate import _store_index, store as store_mod
from ablate.record import SCHEMA_VERSION, TrialRecord
from ablate.store import INDEX, Store, index, problems, read_records

ROOT = Path(__file__).resolve().parents[2]
V1 = Path(__file__).parent / "data" / "store-v1" / "default"
V1_ID = "rmsnorm--goal_only--scripted--s0--47e47fac"


def study_copy(tmp_path) -> Path:
    """The committed v1 store (one trial, as the first run_trial wrote it), copied to work on."""
    dest = tmp_path / "store" / "default"
    shutil.copytree(V1, dest)
    return dest


def record_like(study: Path, trial_id: str, **fields) -> Path:
    """A valid current-schema trial directory made from the fixture's record."""
    rec = json.loads((V1 / V1_ID / "record.json").read_text())
    rec.update(schema=SCHEMA_VERSION, trial_id=trial_id, **fields)
    rec.pop("verdict")
    d = study / trial_id
    d.mkdir(parents=True)
    (d / "record.json").write_text(json.dumps(rec))
    return d


def test_the_v1_fixture_is_what_the_first_store_wrote():
    raw = json.loads((V1 / V1_ID / "record.json").read_text())
    assert raw["schema"] == 1 and raw["verdict"] == "accepted" and "operator_source" not in raw
    assert raw["spec"]["operator_set"]["names"] == ["rmsnorm"]  # v1 kept the whole operator set
    assert {p.name for p in (V1 / V1_ID).iterdir()} >= {"record.json", "evaluation.json", "kernel.py",
                                                        "transcript.jsonl", "model_calls.jsonl"}


def test_a_v1_record_still_reads_as_a_typed_record_and_resolves_its_operator(tmp_path):
    study = study_copy(tmp_path)  # a reader writes the study's index: never into the repository
    [rec] = read_records(study, evaluation="original")
    assert isinstance(rec, TrialRecord) and rec.schema == SCHEMA_VERSION
    assert rec.trial_id == V1_ID and rec.arm == "goal_only" and rec.seed == 0
    assert rec.verdict == "accepted" and rec.evaluation["timing"] == "cpu-interpreted"
    assert rec.operator_source == {}  # a registry operator without external baselines needs nothing more
    assert rec.resolve_operator().name == "rmsnorm"
    assert rec.attempt == 1 and rec.failures == [] and rec.path == study / V1_ID
    assert rec.agent["turns"] == 11 and rec.harness == {"name": "goal_only", "mechanisms": {}}


def test_a_v1_record_of_an_external_operator_keeps_only_its_own_node():
    raw = json.loads((V1 / V1_ID / "record.json").read_text())
    raw["operator"] = "kernelbench/3_Log"
    raw["spec"]["operator_set"] = {"source": "kernelbench", "path": "/data/KernelBench", "level": 1, "names": [],
                                   "shapes": {"public": "public", "eval": "eval"}, "external_baselines": {}}
    rec = TrialRecord.from_dict(raw)
    assert rec.operator_source == {"source": "kernelbench", "path": "/data/KernelBench", "level": 1, "names": ["3_Log"]}


def test_round_trip_keeps_fields_a_newer_writer_added():
    raw = json.loads((V1 / V1_ID / "record.json").read_text())
    rec = TrialRecord.from_dict(raw)
    d = rec.to_dict()
    d["mechanism_use"] = {"wiki_queries": 3}  # a field this version does not know
    again = TrialRecord.from_dict(json.loads(json.dumps(d)))
    assert again.to_dict() == d and again.extra == {"mechanism_use": {"wiki_queries": 3}}
    assert d["schema"] == SCHEMA_VERSION and d["verdict"] == "accepted"


@pytest.mark.parametrize("raw,words", [
    ({"schema": 99, "trial_id": "x"}, "unknown record schema 99"),
    ([1, 2], "not an object"),
    ({"schema": 2, "trial_id": "x", "study": "s", "arm": "a", "operator": "o", "seed": 0}, "lacks match_key"),
    ({"schema": 2, "trial_id": "x", "study": "s", "arm": "a", "match_key": "k", "operator": "o", "seed": 0,
      "evaluation": "accepted"}, "evaluation is not an object"),
])
def test_a_bad_record_is_one_clear_error(raw, words):
    with pytest.raises(ValueError, match=words):
        TrialRecord.from_dict(raw)


def test_corrupt_trial_directories_are_reported_and_skipped_everywhere(tmp_path, caplog):
    study = study_copy(tmp_path)
    (study / "bad-json").mkdir()
    (study / "bad-json" / "record.json").write_text('{"trial_id": "bad-json", ')
    (study / "not-a-record").mkdir()
    (study / "not-a-record" / "record.json").write_text("[]")
    (study / "wrong-schema").mkdir()
    (study / "wrong-schema" / "record.json").write_text('{"schema": 7}')
    with caplog.at_level(logging.WARNING, logger="ablate.store"):
        recs = read_records(study)
    assert [r.trial_id for r in recs] == [V1_ID]
    logged = caplog.text
    assert "bad-json: record.json is not valid JSON" in logged and "not-a-record" in logged and "wrong-schema" in logged
    assert {Path(d).name for d, _ in problems(study)} == {"bad-json", "not-a-record", "wrong-schema"}
    # the analysis command reads past them with a line each, no traceback
    out = subprocess.run([sys.executable, "-m", "ablate.analysis", str(study)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr + out.stdout, out.stderr[-3000:]
    assert all(name in out.stdout for name in ("bad-json", "not-a-record", "wrong-schema"))  # named, once each
    assert "skipped 3 record(s)" in out.stdout
    assert "1 trials" in out.stdout


def test_the_index_is_parquet_rebuilt_from_the_directories_and_only_what_changed_is_read(tmp_path, monkeypatch):
    import pandas as pd

    study = study_copy(tmp_path)
    for i in range(3):
        record_like(study, f"t{i}", seed=i)
    df = index(study)
    assert sorted(df["dir"]) == [V1_ID, "t0", "t1", "t2"] and (study / INDEX).is_file()
    on_disk = pd.read_parquet(study / INDEX)
    assert set(on_disk["trial_id"]) == {V1_ID, "t0", "t1", "t2"} and set(on_disk["verdict"]) == {"accepted"}

    reads = []
    real = _store_index._read_trial
    monkeypatch.setattr(_store_index, "_read_trial", lambda d: reads.append(d.name) or real(d))
    assert len(index(study)) == 4 and reads == []  # nothing changed: no record file read
    rec = json.loads((study / "t1" / "record.json").read_text())
    rec["end_reason"] = "turns"
    (study / "t1" / "record.json").write_text(json.dumps(rec))
    shutil.rmtree(study / "t2")
    df = index(study)
    assert reads == ["t1"] and sorted(df["dir"]) == [V1_ID, "t0", "t1"]
    assert df.set_index("dir").loc["t1", "end_reason"] == "turns"
    # an edit of the same size with its old mtime put back is still seen (ctime moves)
    path = study / "t0" / "record.json"
    st, text = path.stat(), path.read_text()
    path.write_text(text.replace('"submitted"', '"turns____"'))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    reads.clear()
    assert index(study).set_index("dir").loc["t0", "end_reason"] == "turns____" and reads == ["t0"]
    # a damaged index is rebuilt from the directories, not trusted
    (study / INDEX).write_bytes(b"PAR1 garbage")
    reads.clear()
    assert sorted(index(study)["dir"]) == [V1_ID, "t0", "t1"] and len(reads) == 3


def test_a_failed_write_leaves_no_half_written_record(tmp_path, monkeypatch):
    store = Store(tmp_path / "store")
    writer = store.begin("s", "trial-a")
    writer.model_call({"request": {}, "response": {"usage": {"total_tokens": 10, "cost_usd": 0.5}}})
    rec = TrialRecord.from_dict(json.loads((V1 / V1_ID / "record.json").read_text()))

    real_fdopen = os.fdopen

    class Truncating:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])  # half of it reaches the disk, then the disk is full
            raise OSError(28, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(os, "fdopen", lambda fd, mode: Truncating(real_fdopen(fd, mode)))
    with pytest.raises(OSError, match="No space"):
        writer.commit(rec)
    monkeypatch.setattr(os, "fdopen", real_fdopen)
    assert not (store.root / "s" / "trial-a").exists()
    assert not list((store.root / "s").rglob("record.json"))
    assert not list((store.root / "s").rglob("*.part"))  # the partial temporary file is gone too
    kept = writer.fail({"kind": "crash", "cause": "OSError", "message": "No space left on device"})
    assert (kept / "model_calls.jsonl").read_text().count("\n") == 1  # what was paid for is kept
    assert store.failures("s", "trial-a")[0]["cause"] == "OSError"
    assert read_records(store.root / "s") == []


def test_a_failed_index_write_keeps_the_old_index(tmp_path, monkeypatch):
    study = study_copy(tmp_path)
    index(study)
    before = (study / INDEX).read_bytes()
    record_like(study, "t9")
    import pyarrow.parquet as pq

    def broken(table, where):
        Path(where).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", broken)
    assert sorted(index(study)["dir"]) == [V1_ID, "t9"]  # still answers, from the directories
    assert (study / INDEX).read_bytes() == before and not list(study.glob(".index*"))


def test_commit_is_atomic_and_a_duplicate_is_kept_aside(tmp_path):
    store = Store(tmp_path / "store")
    rec = TrialRecord.from_dict(json.loads((V1 / V1_ID / "record.json").read_text()))
    first, second = store.begin("s", "t"), store.begin("s", "t")
    (first.path / "kernel.py").write_text("one")
    (second.path / "kernel.py").write_text("two")
    assert first.commit(rec) == second.commit(rec) == store.trial_dir("s", "t")
    assert (store.trial_dir("s", "t") / "kernel.py").read_text() == "one"
    assert store.failures("s", "t") == [{"kind": "duplicate", "cause": "duplicate",
                                         "message": f"{store.trial_dir('s', 't')} was already complete"}]
    assert not list((store.root / "s").glob(".tmp-*"))


def _dead_writer(store_root: Path) -> Path:
    """A TrialWriter in another process, killed with SIGKILL after one streamed model call."""
    code = ("import sys, time; from ablate.store import Store; w = Store(sys.argv[1]).begin('s', 'dead-trial'); "
            "w.model_call({'request': {}, 'response': {'usage': {'total_tokens': 7, 'cost_usd': 0.25}}}); "
            "w.messages([{'role': 'user', 'content': 'go'}]); print(w.path, flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code, str(store_root)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    path = Path(p.stdout.readline().strip())
    p.send_signal(signal.SIGKILL)
    p.wait()
    return path


def test_stale_temporary_directories_of_dead_runs_only_are_kept_aside(tmp_path):
    store = Store(tmp_path / "store")
    dead = _dead_writer(store.root)
    alive = store.begin("s", "running-here")  # this process: alive
    # a directory owned by a process on another host: judged by its heartbeat
    remote_fresh, remote_old = store.begin("s", "remote-fresh"), store.begin("s", "remote-old")
    for w in (remote_fresh, remote_old):
        w._stop.set()
        owner = json.loads((w.path / "owner.json").read_text()) | {"host": "other-node"}
        (w.path / "owner.json").write_text(json.dumps(owner))
    old = time.time() - store_mod.STALE_AFTER_S - 5
    os.utime(remote_old.path / "owner.json", (old, old))
    # our own pid, but another process's start time: the pid was reused, the owner is gone
    reused = store.begin("s", "pid-reused")
    reused._stop.set()
    owner = json.loads((reused.path / "owner.json").read_text()) | {"pid_start": 1}
    (reused.path / "owner.json").write_text(json.dumps(owner))

    kept = store.clean_stale("s")
    assert {json.loads((k / "incomplete.json").read_text())["trial_id"] for k in kept} == \
        {"dead-trial", "remote-old", "pid-reused"}
    assert alive.path.is_dir() and remote_fresh.path.is_dir() and not dead.exists()
    [lost] = [k for k in kept if k.parent.name == "dead-trial"]
    info = json.loads((lost / "incomplete.json").read_text())
    assert info["failure"]["kind"] == "infrastructure" and info["failure"]["cause"] == "node_lost"
    assert info["paid"] == {"total_tokens": 7, "cost_usd": 0.25}
    assert (lost / "model_calls.jsonl").read_text().count("\n") == 1 and (lost / "transcript.jsonl").is_file()
    assert store.clean_stale("s") == []  # nothing else is stale
    assert socket.gethostname() != "other-node"


def test_read_records_gives_the_evaluation_asked_for(tmp_path, caplog):
    study = study_copy(tmp_path)
    d = study / V1_ID
    other = record_like(study, "t-no-rescore")
    s = Store(study.parent)
    base = {"device": "cpu", "shape_set": "smoke", "environment": {}}
    s.add_rescoring(d, {**base, "evaluation": {"verdict": "rejected", "reasons": ["incorrect"], "evaluator_version": "2"},
                        "evaluator_version": "2", "rescored_at": "2026-12-02T00:00:00"}, "a")
    s.add_rescoring(d, {**base, "evaluation": {"verdict": "accepted", "evaluator_version": "3", "geomean_speedup": 2.0},
                        "evaluator_version": "3", "rescored_at": "2026-12-03T00:00:00"}, "b")
    by = {e: {r.trial_id: r for r in read_records(study, evaluation=e)} for e in ("original", "latest", "2")}
    assert by["original"][V1_ID].evaluation_source == "original" and by["original"][V1_ID].verdict == "accepted"
    assert by["latest"][V1_ID].evaluation_source == "b" and by["latest"][V1_ID].evaluation["geomean_speedup"] == 2.0
    assert by["latest"]["t-no-rescore"].evaluation_source == "original"  # nothing newer: the original
    assert by["2"][V1_ID].verdict == "rejected" and len(by["2"][V1_ID].rescorings) == 2
    assert "t-no-rescore" not in by["2"]  # never judged by version 2: left out, not mixed in
    assert "1 trial(s) have no evaluation by evaluator version 2" in caplog.text
    assert json.loads((d / "evaluation.json").read_text())["verdict"] == "accepted"  # the original is untouched
    assert other.is_dir()


def test_read_records_takes_a_store_a_study_or_a_trial(tmp_path):
    study = study_copy(tmp_path)
    record_like(tmp_path / "store" / "other", "x1")
    assert {r.trial_id for r in read_records(tmp_path / "store")} == {V1_ID, "x1"}
    assert [r.trial_id for r in read_records(study)] == [V1_ID]
    assert [r.trial_id for r in read_records(study / V1_ID)] == [V1_ID]
    with pytest.raises(FileNotFoundError, match="no such store"):
        read_records(tmp_path / "nope")
