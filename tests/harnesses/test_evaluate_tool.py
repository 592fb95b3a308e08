"""The evaluate tool: the trusted evaluator on the public shapes, its time charged like any tool's."""
import json
import time

import pytest

from ablate import harnesses
from ablate.harnesses import Budget


def _evaluate(seen):
    def evaluate(path):
        seen.append(path)
        time.sleep(0.2)
        return {"verdict": "accepted", "reasons": [], "timing": "judge-clock", "geomean_speedup": 1.1,
                "shapes": [{"shape": {"M": 1}, "correct": True}]}
    return evaluate


@pytest.mark.parametrize("gpu,gpu_s", [("NVIDIA H200", 0.2), (None, 0.0)])
def test_the_evaluator_callback_its_time_and_its_gpu_time(ws, h, gpu, gpu_s):
    seen = []
    harness = harnesses.build({"name": "e", "mechanisms": {"evaluate_tool": {}}})
    r = harness.run(h.Playback([h.WRITE, ("evaluate", {}), ("evaluate", {"path": "nope.py"}), ("submit", {})]),
                    h.make_task(_evaluate(seen), gpu=gpu), ws, Budget(turns=6))
    out = h.tool_results(r)
    assert seen == [str(ws.path / "kernel.py")]
    assert json.loads(out[1].content)["verdict"] == "accepted" and out[2].is_error
    spent = r.spent["evaluate_tool"]
    assert spent.tool_s == pytest.approx(0.2, abs=0.1) and spent.gpu_s == pytest.approx(gpu_s, abs=0.1)
    assert r.gpu_s == pytest.approx(gpu_s, abs=0.1)  # charged to the trial's gpu_s as a shell command's would be
    assert r.mechanisms["evaluate_tool"]["evaluations"] == 1 and r.mechanisms["evaluate_tool"]["accepted"] == 1


def test_gpu_budget_ends_a_trial_that_spends_it_on_evaluations(ws, h):
    harness = harnesses.build({"name": "e", "mechanisms": {"evaluate_tool": {}}})
    calls = [h.WRITE] + [("evaluate", {})] * 10 + [("submit", {})]
    r = harness.run(h.Playback(calls), h.make_task(_evaluate([]), gpu="NVIDIA H200"), ws, Budget(turns=20, gpu_s=0.5))
    assert r.end_reason == "gpu_s" and not r.submitted
