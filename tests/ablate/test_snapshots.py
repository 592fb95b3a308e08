"""Snapshots of kernel.py along a trial: a copy per change, with the spend so far; nothing the
agent can point elsewhere (a symlink, a FIFO) or blow up (a huge file) is followed or copied."""
import hashlib
import os
from types import SimpleNamespace

import pytest

from ablate import snapshots
from ablate.models import Usage
from ablate.sandbox import Limits, Workspace


@pytest.fixture
def ws(tmp_path):
    return Workspace.create(tmp_path / "ws", {"reference.py": b"def reference(x): return x\n"}, Limits(confinement="none"))


def state(turn, tokens, cost=0.0):
    return SimpleNamespace(result=SimpleNamespace(turns=turn, usage=Usage(input_tokens=tokens, cost_usd=cost)))


def test_a_copy_per_change_with_the_spend_so_far(ws, tmp_path):
    snaps = snapshots.Snapshots(ws, tmp_path / "trial" / "snapshots")
    (tmp_path / "trial").mkdir()
    snaps.after_tool(state(1, 10), "bash")  # no kernel.py yet: nothing, and no count
    ws.write("kernel.py", b"v1")
    snaps.after_tool(state(2, 20, 0.1), "write_file")
    snaps.after_tool(state(3, 30, 0.2), "bash")  # unchanged: no copy
    ws.write("kernel.py", b"v2")
    snaps.after_tool(state(3, 30, 0.2), "write_file")
    ws.write("kernel.py", b"v3")
    snaps.after_tool(state(3, 30, 0.2), "write_file")  # a second change in the same turn
    d = snaps.describe()
    assert [(s["turn"], s["tokens"], s["cost_usd"], s["file"], s["tool"]) for s in d["taken"]] == [
        (2, 20, 0.1, "turn-0002.py", "write_file"), (3, 30, 0.2, "turn-0003.py", "write_file"),
        (3, 30, 0.2, "turn-0003-2.py", "write_file")]
    for s, data in zip(d["taken"], (b"v1", b"v2", b"v3")):
        assert (tmp_path / "trial" / "snapshots" / s["file"]).read_bytes() == data
        assert s["sha256"] == hashlib.sha256(data).hexdigest() and s["bytes"] == len(data)
    assert d["not_kept"] == {} and d["limit"] == snapshots.LIMIT and d["max_bytes"] == snapshots.MAX_BYTES


def test_a_symlink_a_fifo_and_a_huge_file_are_never_copied_only_counted(ws, tmp_path):
    folder = tmp_path / "snapshots"
    snaps = snapshots.Snapshots(ws, folder)
    secret = tmp_path / "secret.txt"
    secret.write_text("the judge's seed")
    os.symlink(secret, ws.path / "kernel.py")  # out of the workspace
    snaps.after_tool(state(1, 1))
    snaps.after_tool(state(2, 2))  # still the same link: counted once
    os.unlink(ws.path / "kernel.py")
    ws.write("impl.py", b"def kernel(x): return x\n")
    os.symlink("impl.py", ws.path / "kernel.py")  # inside the workspace: not followed either
    snaps.after_tool(state(3, 3))
    os.unlink(ws.path / "kernel.py")
    os.mkfifo(ws.path / "kernel.py")  # would hang a plain reader
    snaps.after_tool(state(4, 4))
    os.unlink(ws.path / "kernel.py")
    with open(ws.path / "kernel.py", "wb") as f:  # 2 GiB, sparse: must not be read
        f.truncate(2 << 30)
    snaps.after_tool(state(5, 5))
    assert snaps.describe()["taken"] == [] and not folder.exists()
    assert snaps.describe()["not_kept"] == {"symlink": 1, "not_regular": 1, "too_large": 1}


def test_at_most_limit_copies_the_rest_counted(ws, tmp_path):
    snaps = snapshots.Snapshots(ws, tmp_path / "snapshots", limit=2)
    for i in range(5):
        ws.write("kernel.py", f"v{i}".encode())
        snaps.after_tool(state(i + 1, i))
    d = snaps.describe()
    assert [s["file"] for s in d["taken"]] == ["turn-0001.py", "turn-0002.py"] and d["not_kept"] == {"over_limit": 3}
    assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == ["turn-0001.py", "turn-0002.py"]


def test_a_damaged_snapshot_list_reads_as_its_well_formed_entries():
    good = {"file": "turn-0001.py", "sha256": "ab", "turn": 1}
    assert snapshots.taken({"taken": [good, "x", {"file": "../record.json", "sha256": "ab"}, {"file": 3}]}) == [good]
    assert snapshots.taken(None) == [] and snapshots.taken({"taken": "all"}) == []
