"""The CPU timing loop: rotating input sets, an element moved in every call's input, calls kept
for checking drawn after they return (at least two), and the judge able to rebuild a kept call's
exact input."""
import pytest
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


def _stand_in_cuda(monkeypatch, _timing, log):
    """The GPU loop's CUDA calls stood in for on a CPU: events read the host clock; the spin
    kernel, the records and the flush's zeroing are logged in order."""
    import time

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

    def record(ev, stream):
        ev.t = time.perf_counter()
        log.append("record")

    monkeypatch.setattr(_timing, "_Event", Event)
    monkeypatch.setattr(_timing, "_record", record)
    monkeypatch.setattr(_timing, "_elapsed", lambda s, e: (e.t - s.t) * 1e3)
    monkeypatch.setattr(_timing, "_esync", lambda ev: None)
    monkeypatch.setattr(_timing, "_sync", lambda: None)
    monkeypatch.setattr(_timing, "_spin", lambda cycles: log.append(("spin", cycles)))
    zero = _timing._zero
    monkeypatch.setattr(_timing, "_zero", lambda t: (log.append("flush"), zero(t)))


def test_a_spin_sized_to_the_hosts_launch_holds_the_device_before_each_start_event(monkeypatch):
    """Between the flush and the start event the device spins for SPIN_FACTOR times the host's
    launch time (so a slow host launch is not counted as the kernel's time), bounded above: a
    call whose host side takes 5 ms gets SPIN_MAX_MS, not 10 ms of idle device."""
    import time

    from ablate.evaluate import _timing

    for host_s, want in ((0.0004, None), (0.005, _timing.SPIN_MAX_MS)):
        log = []
        _stand_in_cuda(monkeypatch, _timing, log)

        def fn(x):
            t = time.perf_counter()
            while time.perf_counter() - t < host_s:  # the host's launch path, slow
                pass
            log.append("call")
            return x * 2

        sources = [(torch.full((64,), float(j)),) for j in range(2)]
        r = _timing.measure(fn, (sources[0][0].clone(),), sources, device="cuda", budget_ms=1.0,
                            stream=object(), flush=torch.zeros(16))
        assert r["launch_ms"] >= host_s * 1e3
        assert r["spin_ms"] == (want or _timing.SPIN_FACTOR * r["launch_ms"])
        calls = [i for i, e in enumerate(log) if e == "call"]
        timed = [i for i in calls if log[i - 1] == "record"]  # the wall clock's calls have no events
        assert len(timed) >= r["n"] and len(calls) - len(timed) == min(10, r["n"])
        for i in timed:  # every call with events: flush, spin, start event, the call, end event
            assert log[i - 3] == "flush" and log[i - 2][0] == "spin" and log[i + 1] == "record"
        for i in set(calls) - set(timed):  # the wall clock's: no spin, so it keeps the host's launch
            assert log[i - 1] == "flush"
        spins = [log[i - 2][1] for i in timed]
        assert spins[0] == _timing.SPIN_WARM_CYCLES and len(set(spins[-r["n"]:])) == 1  # sized once


def test_the_gpu_loop_times_then_traces_a_block_each_with_its_own_checked_calls(monkeypatch):
    """The GPU loop's structure, run on CPU tensors with its CUDA calls stood in for: the timed
    calls untraced, then a traced block whose every call sits after a driver range, calls kept for
    checking in each block (at least MIN_KEPT), and each kept output that call's own."""
    from ablate.evaluate import _timing

    _stand_in_cuda(monkeypatch, _timing, [])
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


@pytest.mark.gpu
def test_on_a_gpu_the_spin_keeps_a_slow_host_launch_out_of_the_events(monkeypatch):
    """A call that spends 0.4 ms on the host before launching a 32 MB copy: without the spin the
    device reaches the start event, idles through the host's launch and the events count it;
    with it, the events read the copy alone. The two measured side by side, same call."""
    import time

    from ablate.evaluate import _timing

    x = torch.randn(4 << 20, device="cuda")

    def fn(x):
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0004:
            pass
        return x * 2

    sources = [(x.clone(),) for _ in range(3)]
    spun = _timing.measure(fn, (x.clone(),), sources, device="cuda", budget_ms=20.0)
    monkeypatch.setattr(_timing, "SPIN_MAX_MS", 0.0)
    bare = _timing.measure(fn, (x.clone(),), sources, device="cuda", budget_ms=20.0)
    assert bare["spin_ms"] == 0 and 0.4 <= spun["launch_ms"] and spun["spin_ms"] >= 0.8
    assert bare["median"] > 0.2, bare  # the host's launch, counted
    assert spun["median"] < 0.25 * bare["median"], (spun, bare)
    assert spun["wall_ms"] > 0.4  # the synced wall clock keeps the host's cost
    # the spin lasts what it was sized to, by the host's clock over 50 spins back to back
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(50):
        _timing._spin(spun["spin_cycles"])
    torch.cuda.synchronize()
    assert 0.7 * spun["spin_ms"] < (time.perf_counter() - t) * 1e3 / 50 < 1.5 * spun["spin_ms"], spun
