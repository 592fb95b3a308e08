"""Search over candidates: a lineage of snapshots measured by the harness, the best promoted."""
import json
import math

import pytest

from ablate import harnesses
from ablate.harnesses import Budget
from ablate.harnesses.mechanisms import search as search_mod
from ablate.harnesses.mechanisms._measure import Measurement, improves


class FakeMeasurer:
    def __init__(self, ws, table):
        self.ws, self.table = ws, table

    def measure(self, rel):
        src = self.ws.read_bytes(rel).decode()
        ok, ms = self.table[src.strip().splitlines()[-1]]
        return Measurement("sha-" + rel, {"correct": ok, "ms": ms if ok else None, "shapes": []}, 0.25, 0.1)


def kernel(tag):
    return ("write_file", {"path": "kernel.py", "content": f"def kernel(x):\n    return x\n# {tag}"})


@pytest.fixture
def fake(ws, monkeypatch):
    table = {"# a": (True, 2.0), "# b": (False, 0.5), "# c": (True, 1.0), "# d": (True, 0.99)}
    m = FakeMeasurer(ws, table)
    monkeypatch.setattr(search_mod._measure, "measurer", lambda _ws, _task: m)
    return m


def test_lineage_measured_by_the_harness_and_the_best_promoted(ws, h, fake):
    harness = harnesses.build({"name": "s", "mechanisms": {"search": {}}})
    calls = [kernel("a"), ("candidate", {"change": "first version"}),
             kernel("b"), ("candidate", {"change": "unrolled", "parent": "c1"}),
             kernel("c"), ("candidate", {"change": "two rows per program", "parent": "c1"}),
             kernel("d"), ("candidate", {"change": "within noise of c3", "parent": "c3"}),
             ("candidate", {"change": "orphan", "parent": "c9"}),
             kernel("a"), ("submit", {})]  # kernel.py holds the slow one at submit
    r = harness.run(h.Playback(calls), h.make_task(), ws, Budget(turns=20))
    out = h.tool_results(r)
    assert json.loads(out[1].content)["status"] == "correct"
    assert out[3].is_error and json.loads(out[3].content)["status"] == "incorrect"  # the fastest is wrong: never best
    assert json.loads(out[5].content)["best"] == "c3"
    assert json.loads(out[7].content)["best"] == "c3"  # 1% faster is noise: c3 stays the incumbent
    assert out[8].is_error and "unknown parent 'c9'" in out[8].content
    assert r.submitted and "# c" in (ws.path / "kernel.py").read_text()  # the best replaced the slow kernel.py
    lineage = [json.loads(line) for line in (ws.path / "candidates.jsonl").read_text().splitlines()]
    assert [(c["id"], c["parent"], c["status"]) for c in lineage] == [
        ("c1", None, "superseded"), ("c2", "c1", "incorrect"), ("c3", "c1", "promoted"), ("c4", "c3", "superseded")]
    assert (ws.path / "candidates/c2.py").read_text().endswith("# b")
    use = r.mechanisms["search"]
    assert use["promoted"] == "c3" and use["candidates"] == 4 and use["lineage"][1]["change"] == "unrolled"
    assert r.spent["search"].tool_s == pytest.approx(1.0, abs=0.1) and r.spent["search"].gpu_s == pytest.approx(0.4)


def test_no_correct_candidate_refuses_the_submit(ws, h, fake):
    harness = harnesses.build({"name": "s", "mechanisms": {"search": {}}})
    r = harness.run(h.Playback([kernel("b"), ("candidate", {"change": "x"}), ("submit", {})]), h.make_task(), ws,
                    Budget(turns=4))
    assert h.tool_results(r)[2].is_error and "no correct candidate" in h.tool_results(r)[2].content
    assert not r.submitted


def test_the_promotion_rule():
    assert improves(1.0, None) and improves(0.97, 1.0) and not improves(0.99, 1.0) and not improves(None, 1.0)
    assert math.isclose(search_mod._measure.MARGIN, 0.02)


def test_the_measurement_runs_in_the_sandbox_against_the_tasks_own_reference(tmp_path):
    """The real script, in bubblewrap: a correct kernel, a wrong one, one that raises, and a wrong one
    that passes only against a reference.py the agent rewrote to agree with it."""
    from ablate import operators
    from ablate.sandbox import Workspace
    from ablate.harnesses import Task
    from ablate.harnesses.mechanisms._measure import Measurer

    op = operators.get("rmsnorm")
    shapes = op.shape_set("smoke")
    task_files = {n: p.read_bytes() for n, p in op.task_files.items()} | {"shapes.json": json.dumps(shapes).encode()}
    files = dict(task_files)
    files["good.py"] = b"from reference import reference\ndef kernel(x, w):\n    return reference(x, w)\n"
    files["bad.py"] = b"def kernel(x, w):\n    return x\n"
    files["boom.py"] = b"def kernel(x, w):\n    raise RuntimeError('nope')\n"
    ws = Workspace.create(tmp_path / "ws", files)
    m = Measurer(ws, Task("rmsnorm", "goal", shapes, task_files, None), reps=2)
    good = m.measure("good.py")
    assert good.correct and good.ms > 0 and good.seconds > 0 and len(good.result["shapes"]) == 2
    assert m.measure("good.py").seconds == 0  # the same bytes again come from the cache
    assert not m.measure("bad.py").correct
    boom = m.measure("boom.py")
    assert not boom.correct and "RuntimeError: nope" in boom.result["shapes"][0]["error"]
    ws.write("reference.py", files["reference.py"].replace(b"return (xf", b"return x\n    (xf"))  # the agent's edit
    ws.write("shapes.json", b"[]")
    ws.write("bad2.py", b"def kernel(x, w):\n    return x.clone()\n")
    fooled = m.measure("bad2.py")
    assert not fooled.correct and len(fooled.result["shapes"]) == 2


def test_a_symlink_planted_by_the_agent_is_an_error_not_a_crash(ws, h, fake, tmp_path):
    (tmp_path / "outside").mkdir()
    harness = harnesses.build({"name": "s", "mechanisms": {"search": {}, "workflow": {}}})
    calls = [kernel("a"), ("bash", {"command": f"ln -s {tmp_path / 'outside'} candidates && ln -s /etc/passwd docs"}),
             ("candidate", {"change": "through the link"}), ("workflow", {"action": "advance"}), ("submit", {})]
    r = harness.run(h.Playback(calls), h.make_task(), ws, Budget(turns=6))
    out = h.tool_results(r)
    assert out[2].is_error and "candidate:" in out[2].content and not list((tmp_path / "outside").iterdir())
    assert out[3].is_error and "docs/draft.md does not exist" in out[3].content
    assert r.end_reason != "submitted"


def test_the_measurement_accepts_any_tied_index_where_the_operator_does(tmp_path):
    """Top-k with ties: a kernel that picks the last of the tied columns is right (the operator's
    rule), one whose indices point elsewhere is not, whatever the reference's own tie-break."""
    from ablate import operators
    from ablate.sandbox import Workspace
    from ablate.harnesses import Task
    from ablate.harnesses.mechanisms._measure import Measurer

    op = operators.get("topk")
    shapes = op.shape_set("smoke")
    task_files = {n: p.read_bytes() for n, p in op.task_files.items()} | {"shapes.json": json.dumps(shapes).encode()}
    files = dict(task_files)
    # bf16 rows of a few thousand values hold many ties; flipping the row picks the last tied column
    files["last_tie.py"] = (b"import torch\ndef kernel(x, k):\n    n = x.shape[-1]\n"
                            b"    v, i = torch.topk(x.flip(-1), k, dim=-1)\n    return v, (n - 1 - i)\n")
    files["shifted.py"] = (b"import torch\ndef kernel(x, k):\n    v, i = torch.topk(x, k, dim=-1)\n"
                           b"    return v, (i + 1) % x.shape[-1]\n")
    ws = Workspace.create(tmp_path / "ws", files)
    m = Measurer(ws, Task("topk", "goal", shapes, task_files, None), reps=2)
    assert m.measure("last_tie.py").correct, m.measure("last_tie.py").result
    assert not m.measure("shifted.py").correct
