"""The CPU timing loop: every input set is used and one call per set is kept for checking."""
import random

import torch

from ablate.evaluate._timing import _plan, measure, stats


def test_plan_covers_every_set_with_one_checked_call():
    for n, k in [(4, 4), (10, 3), (100, 4)]:
        order, checked = _plan(n, k, random.Random(n))
        assert sorted(set(order)) == list(range(k))
        assert sorted(checked.values()) == list(range(k))
        assert all(order[i] == j for i, j in checked.items())


def test_stats_percentiles():
    s = stats([float(i) for i in range(1, 102)])
    assert (s["median"], s["p10"], s["p90"], s["n"]) == (51.0, 11.0, 91.0, 101)


def test_cpu_measure_refills_inputs_and_keeps_outputs_per_set():
    sources = [(torch.full((3,), float(j)),) for j in range(4)]
    live = (sources[0][0].clone(),)
    seen = []

    def fn(x):
        seen.append(float(x[0]))
        return x * 2

    result, kept = measure(fn, live, sources, device="cpu", rng=random.Random(0), est_ms=1000.0)
    assert result["n"] == 4 and result["median"] >= 0 and result["wall_ms"] == result["median"]
    assert sorted(seen) == [0.0, 1.0, 2.0, 3.0]  # each call saw a refilled input set
    for j, (_, outs) in kept.items():
        assert torch.equal(outs[0], torch.full((3,), 2.0 * j))  # kept outputs are copies of that call's result
