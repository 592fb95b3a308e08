"""The workflow controller checks each step's artefact, not the agent's say-so: documents and their
sections, a new kernel it snapshots, the validation and measurement it runs itself, decisions
consistent with those measurements, ranked directions with a cap, and the submit gate."""
import json

import pytest

from ablate import harnesses
from ablate.harnesses import Budget
from ablate.harnesses.mechanisms import workflow as wf

DRAFT = """# Draft
## Baseline
the reference, checked by the controller on the public shapes.
## Risks
none known yet; a first kernel may be wrong on tails.
## Directions
{table}
## Steps
1. write it
## Validation
the controller's run
## Evidence
correct and faster
"""
TABLE = """| direction | benefit | risk | evidence |
|---|---|---|---|
| wider blocks | medium | low | profile: 40% of copy rate |
| fuse passes | high | high | two passes over the input |
| more warps | high | low | occupancy 25% |"""
PLAN = "# Plan\n1. implement the candidate\n2. advance and decide on its measurement\n## Acceptance\ncorrect, and faster than the kept one\n"


class FakeMeasurer:
    """Measurements by kernel text: {source: (correct, ms per shape)}. Counts calls."""

    def __init__(self, table):
        self.table, self.calls = table, 0

    def measure(self, rel):
        from ablate.harnesses.mechanisms._measure import Measurement

        self.calls += 1
        src = self.ws.read_bytes(rel).decode()
        ok, times = self.table[src]
        import math
        ms = math.exp(sum(map(math.log, times)) / len(times)) if ok else None
        return Measurement("x", {"correct": ok, "ms": ms, "shapes": [{"shape": {"M": i}, "correct": ok, "ms": t if ok else None}
                                                                     for i, t in enumerate(times)]}, 0.5, 0.0)


@pytest.fixture
def controller(ws, h, monkeypatch):
    """A workflow tool bound to a workspace, with measurements faked by kernel text."""
    mech = harnesses.build({"name": "w", "mechanisms": {"workflow": {"iterations_per_direction": 2}}}).mechanisms[0]
    tool = mech.tools(h.make_task(), ws, None)["workflow"]
    fake = FakeMeasurer({})
    fake.ws = ws
    monkeypatch.setattr(wf._measure, "measurer", lambda _ws, _task: fake)

    def call(**args):
        out = tool.run(args)
        return json.loads(out.content), out.is_error

    def kernel(name, ok=True, times=(1.0,)):
        src = f"def kernel(x):\n    return x  # {name}\n"
        fake.table[src] = (ok, list(times))
        ws.write("kernel.py", src.encode())
    return mech, call, kernel, ws, fake


def test_say_so_is_not_enough_each_artefact_is_checked(controller):
    mech, call, kernel, ws, fake = controller
    out, err = call(action="advance")
    assert err and "docs/draft.md does not exist" in out["result"]
    ws.write("docs/draft.md", b"# Draft\n## Baseline\nthe reference, which is checked by the harness. Nothing else here yet.\n")
    out, err = call(action="advance")
    assert err and "lacks the sections ## Risks, ## Directions, ## Steps, ## Validation, ## Evidence" in out["result"]
    ws.write("docs/draft.md", DRAFT.format(table="none yet").encode())
    assert not call(action="advance")[1] and mech.step == "plan"
    ws.write("docs/plan.md", b"# Plan\nDo the thing carefully, then measure it and think hard about what to do next, and then do that.\n")
    out, err = call(action="advance")
    assert err and "numbered steps" in out["result"]
    ws.write("docs/plan.md", PLAN.encode())
    assert not call(action="advance")[1] and mech.step == "implement"
    out, err = call(action="advance")
    assert err and "kernel.py does not exist" in out["result"]
    ws.write("kernel.py", b"def kernel(:\n")
    assert "does not parse" in call(action="advance")[0]["result"]
    ws.write("kernel.py", b"def other(x):\n    return x\n")
    assert "defines no function `kernel`" in call(action="advance")[0]["result"]
    out, err = call(action="decide", decision="keep", reason="it is surely fine and fast")
    assert err and "nothing to decide" in out["result"]
    assert fake.calls == 0 and mech.candidates == []  # nothing was measured or recorded on the agent's word


def test_phase_one_keeps_only_a_correct_candidate_and_writes_the_reason_down(controller):
    mech, call, kernel, ws, fake = controller
    ws.write("docs/draft.md", DRAFT.format(table="none").encode()); call(action="advance")
    ws.write("docs/plan.md", PLAN.encode()); call(action="advance")
    kernel("wrong", ok=False)
    out, err = call(action="advance")
    assert not err and "validated and measured" in out["result"] and mech.step == "decide"
    assert (ws.path / "runs/1/kernel.py").read_text() == (ws.path / "kernel.py").read_text()
    assert json.loads((ws.path / "runs/1/measurement.json").read_text())["correct"] is False
    assert "1,correct,,\"{\"M\": 0}\",0," in (ws.path / "benchmark.csv").read_text()
    out, err = call(action="decide", decision="keep", reason="looks right to me, keep it")
    assert err and "incorrect on the public shapes" in out["result"]
    assert call(action="decide", decision="revise", reason="ok")[1]  # a reason, not a placeholder
    assert not call(action="decide", decision="revise", reason="wrong on the first shape: fix the mask")[1]
    assert "fix the mask" in (ws.path / "docs/decisions.md").read_text()
    assert "already tried" in call(action="advance")[0]["result"]  # the same kernel again is not a new candidate
    out, err = call(action="next_phase", reason="moving on to speed now")
    assert err and "kept correct candidate" in out["result"]
    kernel("right", times=(2.0,))
    call(action="advance")
    assert not call(action="decide", decision="keep", reason="correct on every public shape")[1]
    assert mech.kept["id"] == 2
    assert not call(action="next_phase", reason="a correct kernel is kept")[1] and mech.phase["name"] == "optimise"


def _to_optimise(call, kernel, ws):
    ws.write("docs/draft.md", DRAFT.format(table="none").encode()); call(action="advance")
    ws.write("docs/plan.md", PLAN.encode()); call(action="advance")
    kernel("base", times=(2.0, 2.0)); call(action="advance")
    call(action="decide", decision="keep", reason="correct on every public shape")
    call(action="next_phase", reason="a correct kernel is kept")


def test_optimise_ranks_directions_caps_iterations_and_keeps_only_measured_wins(controller):
    mech, call, kernel, ws, fake = controller
    _to_optimise(call, kernel, ws)
    out, err = call(action="advance")
    assert err and "previous phase's" in out["result"]  # each phase needs its own draft
    ws.write("docs/draft.md", DRAFT.format(table="| direction | benefit |\n|---|---|\n| x | high |").encode())
    assert "columns direction | benefit | risk | evidence" in call(action="advance")[0]["result"]
    ws.write("docs/draft.md", DRAFT.format(table=TABLE).encode())
    out, err = call(action="advance")
    assert not err
    assert [d["direction"] for d in out["directions"]] == ["more warps", "fuse passes", "wider blocks"]  # benefit, then risk
    ws.write("docs/plan.md", PLAN.replace("implement", "implement the top direction").encode()); call(action="advance")
    kernel("slower", times=(2.0, 1.99)); out, _ = call(action="advance")
    assert out["direction"] == "more warps"
    out, err = call(action="decide", decision="keep", reason="it feels faster on the second shape")
    assert err and "not measurably faster" in out["result"]
    call(action="decide", decision="revise", reason="within noise of the kept candidate")
    kernel("faster", times=(1.5, 1.5)); call(action="advance")
    assert not call(action="decide", decision="keep", reason="25% faster on both public shapes")[1]
    assert mech.kept["id"] == 3
    assert mech.phases[-1]["directions"][0]["status"] == "iterations exhausted"  # cap of 2 reached
    kernel("fused", ok=False); out, _ = call(action="advance")
    assert out["direction"] == "fuse passes"
    call(action="decide", decision="reject", reason="the fused version is wrong on tails, too risky")
    assert mech.phases[-1]["directions"][1]["status"].startswith("rejected: the fused version")
    assert not call(action="next_phase", reason="remaining direction not worth the budget")[1]
    assert mech.phases[1]["directions"][2]["status"].startswith("closed:")


def test_specialise_keeps_a_variant_only_for_a_win_without_a_loss(controller):
    mech, call, kernel, ws, fake = controller
    _to_optimise(call, kernel, ws)
    ws.write("docs/draft.md", DRAFT.format(table=TABLE).encode()); call(action="advance")
    ws.write("docs/plan.md", PLAN.replace("candidate", "first candidate").encode()); call(action="advance")
    kernel("opt", times=(1.0, 1.0)); call(action="advance")
    call(action="decide", decision="keep", reason="twice as fast on both shapes")
    call(action="next_phase", reason="the top direction paid off")
    ws.write("docs/draft.md", DRAFT.format(table="dispatch by row length").replace("Baseline", "Baseline\nspecialise").encode())
    call(action="advance")
    ws.write("docs/plan.md", PLAN.replace("candidate", "dispatching candidate").encode()); call(action="advance")
    kernel("trade", times=(0.5, 1.2)); call(action="advance")
    out, err = call(action="decide", decision="keep", reason="much faster on the first shape")
    assert err and "no loss on any" in out["result"]
    call(action="decide", decision="reject", reason="it loses 20% on the second shape")
    kernel("win", times=(0.5, 1.0)); call(action="advance")
    assert not call(action="decide", decision="keep", reason="faster on shape 0, equal on shape 1")[1]


def test_submit_waits_for_every_phase_and_the_kept_kernel(ws, h, monkeypatch):
    harness = harnesses.build({"name": "w", "mechanisms": {"workflow": {"phases": ["correct"]}}})
    src = "def kernel(x):\n    return x  # kept\n"
    fake = FakeMeasurer({src: (True, [1.0])})
    fake.ws = ws
    monkeypatch.setattr(wf._measure, "measurer", lambda _ws, _task: fake)
    calls = [h.WRITE, ("submit", {}),
             ("write_file", {"path": "docs/draft.md", "content": DRAFT.format(table="none")}), ("workflow", {"action": "advance"}),
             ("write_file", {"path": "docs/plan.md", "content": PLAN}), ("workflow", {"action": "advance"}),
             ("write_file", {"path": "kernel.py", "content": src}), ("workflow", {"action": "advance"}),
             ("workflow", {"action": "decide", "decision": "keep", "reason": "correct on the public shape"}),
             ("workflow", {"action": "next_phase", "reason": "the only phase is done"}),
             ("write_file", {"path": "kernel.py", "content": "def kernel(x):\n    return x  # untested edit\n"}),
             ("submit", {}), ("write_file", {"path": "kernel.py", "content": src}), ("submit", {})]
    r = harness.run(h.Playback(calls), h.make_task(), ws, Budget(turns=20))
    out = h.tool_results(r)
    assert out[1].is_error and "workflow is in phase correct at step draft" in out[1].content
    assert out[11].is_error and "not the kept candidate 1" in out[11].content
    assert r.end_reason == "submitted" and r.turns == 14
    use = r.mechanisms["workflow"]
    assert use["completed"] and use["kept"] == 1 and use["phases"][0]["draft"] and use["phases"][0]["plan"]
    assert use["candidates"][0]["decision"] == "keep" and use["candidates"][0]["reason"] == "correct on the public shape"
    assert {e["step"] for e in use["log"]} >= {"draft", "plan", "validate", "measure", "decide"}
    assert r.spent["workflow"].tool_s == pytest.approx(0.5, abs=0.2)  # the controller's measurement is charged to it


def test_the_first_phase_must_be_correct():
    from ablate.errors import AblateError

    with pytest.raises(AblateError, match="first workflow phase must be 'correct'"):
        harnesses.build({"name": "w", "mechanisms": {"workflow": {"phases": ["optimise"]}}})


def test_with_search_the_promoted_candidate_must_also_be_the_kept_one(ws, h, monkeypatch):
    harness = harnesses.build({"name": "w", "mechanisms": {"workflow": {"phases": ["correct"]}, "search": {}}})
    slow, fast = ("def kernel(x):\n    return x  # slow\n", "def kernel(x):\n    return x  # fast\n")
    fake = FakeMeasurer({slow: (True, [2.0]), fast: (True, [1.0])})
    fake.ws = ws
    monkeypatch.setattr(wf._measure, "measurer", lambda _ws, _task: fake)
    calls = [("write_file", {"path": "docs/draft.md", "content": DRAFT.format(table="none")}), ("workflow", {"action": "advance"}),
             ("write_file", {"path": "docs/plan.md", "content": PLAN}), ("workflow", {"action": "advance"}),
             ("write_file", {"path": "kernel.py", "content": fast}), ("candidate", {"change": "fast, never shown to the workflow"}),
             ("write_file", {"path": "kernel.py", "content": slow}), ("candidate", {"change": "slow"}),
             ("workflow", {"action": "advance"}),
             ("workflow", {"action": "decide", "decision": "keep", "reason": "correct on the public shape"}),
             ("workflow", {"action": "next_phase", "reason": "the only phase is done"}), ("submit", {})]
    r = harness.run(h.Playback(calls), h.make_task(), ws, Budget(turns=20))
    last = h.tool_results(r)[-1]
    assert last.is_error and "not the kept candidate 1" in last.content  # the search promoted c1 over it
    assert "# fast" in (ws.path / "kernel.py").read_text() and not r.submitted
