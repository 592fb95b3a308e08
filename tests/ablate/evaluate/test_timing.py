"""The CPU timing loop: rotating input sets, an element moved in every call's input, calls kept
for checking drawn after they return (at least two), and the judge able to rebuild a kept call's
exact input."""
import torch

from ablate.evaluate._timing import MIN_KEPT, apply_perturbation, measure, perturb, stats


def test_stats_percentiles():
    s = stats([float(i) for i in range(1, 102)])
    assert (s["median"], s["p10"], s["p90"], s["n"]) == (51.0, 11.0, 91.0, 101)
    assert stats([1.0, 2.0])["median"] == 1.5


def test_perturbation_moves_one_element_and_the_judge_can_redo_it():
    x = torch.arange(100.0).reshape(10, 10)
    live = (x.clone(), 3)
    moves = perturb(live)
    assert len(moves) == 1 and moves[0][0] == 0  # the integer input is left alone
    assert torch.equal(apply_perturbation((x, 3), moves)[0], live[0])
    assert int((live[0] != x).sum()) <= 1


def test_cpu_measure_refills_perturbs_and_keeps_calls():
    sources = [(torch.full((64,), float(j)),) for j in range(4)]
    live = (sources[0][0].clone(),)
    seen, kept = [], []

    def fn(x):
        seen.append(x.clone())
        return x * 2

    result = measure(fn, live, sources, device="cpu", est_ms=1000.0,
                     keep=lambda call, j, moves, outs: kept.append((call, j, moves, outs[0].clone())))
    assert result["n"] >= 4 and result["median"] >= 0 and result["wall_ms"] == result["median"]
    assert {float(s.median()) for s in seen} == {0.0, 1.0, 2.0, 3.0}  # every set was used
    assert len(kept) >= MIN_KEPT
    for call, j, moves, out in kept:  # each kept output is that call's, for its exact input
        ins = apply_perturbation(sources[j], moves)
        assert torch.equal(out, ins[0] * 2)
