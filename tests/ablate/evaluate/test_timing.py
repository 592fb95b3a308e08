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


def test_the_gpu_loop_times_then_traces_a_block_each_with_its_own_checked_calls(monkeypatch):
    """The GPU loop's structure, run on CPU tensors with its CUDA calls stood in for: the timed
    calls untraced, then a traced block whose every call sits after a driver range, calls kept for
    checking in each block (at least MIN_KEPT), and each kept output that call's own."""
    import time

    from ablate.evaluate import _timing

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

    monkeypatch.setattr(_timing, "_Event", Event)
    monkeypatch.setattr(_timing, "_record", lambda ev, stream: setattr(ev, "t", time.perf_counter()))
    monkeypatch.setattr(_timing, "_elapsed", lambda s, e: (e.t - s.t) * 1e3)
    monkeypatch.setattr(_timing, "_esync", lambda ev: None)
    monkeypatch.setattr(_timing, "_sync", lambda: None)

    log = []

    class Trace:
        available, why = True, None

        def start(self):
            log.append("start")

        def enter(self, aside=False):
            log.append("aside" if aside else "range")
            return len(log)

        def exit(self, handle):
            pass

        def stop(self):
            log.append("stop")
            return "no records: a stand-in"

    sources = [(torch.full((64,), float(j)),) for j in range(3)]
    live = (sources[0][0].clone(),)
    calls, kept = [], []

    def fn(x):
        calls.append("traced" if "start" in log and "stop" not in log else "untraced")
        return x * 2

    result = _timing.measure(fn, live, sources, device="cuda", budget_ms=1.0, stream=object(),
                             flush=torch.zeros(16), trace=Trace(),
                             keep=lambda call, j, moves, outs: kept.append((call, j, moves, outs[0].clone(), log[-1:])))
    n, nt = result["n"], min(result["n"], _timing.TRACED_CALLS)
    assert n >= 20 and result["trace"] == "no records: a stand-in"
    assert calls.count("traced") == nt and log.count("range") == nt  # a driver range before each traced call
    assert log.index("start") < log.index("stop")
    assert all(c < n for c, *_, at in kept if at == [])  # kept in the timed block, before the trace
    assert all(n <= c < n + nt for c, *_, at in kept if at == ["aside"])  # kept inside the traced block
    assert len(kept) >= 2 * MIN_KEPT  # each block tops up its own checked calls
    assert len({c for c, *_ in kept}) == len(kept)  # every kept call is a different call
    for call, j, moves, out, _ in kept:
        assert torch.equal(out, apply_perturbation(sources[j], moves)[0] * 2)
