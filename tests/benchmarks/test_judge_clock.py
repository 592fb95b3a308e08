"""benchmarks/judge_clock.py's SM clock sampler, against a stand-in nvidia-smi (the comparison
itself needs a CUDA machine)."""
import math
import time

from benchmarks.judge_clock import SmClock, operator_part

FAKE = """#!/bin/sh
# the arguments the sampler must pass, or nothing
case "$*" in *"--query-gpu=clocks.sm,power.draw"*"-lms 50"*) ;; *) exit 3;; esac
echo "1980, 310.5"
echo "[N/A], [N/A]"
echo "1755, 690.25"
echo "1830, 500"
exec sleep 60
"""


def _sampler(tmp_path, monkeypatch, fake: str | None) -> SmClock:
    if fake is not None:
        (tmp_path / "nvidia-smi").write_text(fake)
        (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    return SmClock(device="0")


def test_the_samples_between_two_stamps_give_the_median_clock_and_power(tmp_path, monkeypatch):
    clock = _sampler(tmp_path, monkeypatch, FAKE)
    try:
        deadline = time.monotonic() + 60  # a busy machine: wait for the lines, however slow
        while len(clock.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        got = clock.during(0.0, math.inf)
        assert got == {"sm_mhz": 1830.0, "power_w": 500.0, "samples": 3}  # "[N/A]" skipped
        assert clock.during(0.0, 1.0) is None  # before any sample
    finally:
        clock.close()
    assert clock.proc.poll() is not None  # stopped with the comparison


def test_no_nvidia_smi_means_no_samples_not_an_error(tmp_path, monkeypatch):
    clock = _sampler(tmp_path, monkeypatch, None)
    assert clock.proc is None and clock.during(0.0, math.inf) is None
    clock.close()


def test_do_bench_runs_each_call_in_interleaved_rounds_and_gives_the_medians():
    from benchmarks.judge_clock import bench_rounds

    order, times = [], iter(range(1, 100))

    def plain(fn):
        order.append((fn(), "plain"))
        return float(next(times))

    def graph(fn):
        order.append((fn(), "graph"))
        return float(next(times))

    class Clock:
        def over(self, spans):
            return {"spans": len(spans)}

    bench, at, runs = bench_rounds({"library": lambda: "L", "template": lambda: "T"}, 3, plain, graph, Clock())
    # each round takes both calls, the order reversed every other round
    assert [c for c, _ in order] == ["L", "L", "T", "T", "T", "T", "L", "L", "L", "L", "T", "T"]
    assert runs == {"library": [1.0, 7.0, 9.0], "library_graph": [2.0, 8.0, 10.0],
                    "template": [3.0, 5.0, 11.0], "template_graph": [4.0, 6.0, 12.0]}
    assert bench == {"library": 7.0, "library_graph": 8.0, "template": 5.0, "template_graph": 6.0}
    assert at == {f"do_bench_{k}": {"spans": 3} for k in runs}


def test_the_clock_over_several_spans_takes_the_samples_within_any(tmp_path, monkeypatch):
    clock = _sampler(tmp_path, monkeypatch, None)
    clock.samples = [(1.0, 1980.0, 100.0), (2.0, 1400.0, 700.0), (3.0, 1500.0, 690.0), (4.0, 1980.0, 90.0)]
    assert clock.over([(1.5, 2.5), (2.9, 3.1)]) == {"sm_mhz": 1450.0, "power_w": 695.0, "samples": 2}
    assert clock.during(0.0, 1.0) == {"sm_mhz": 1980.0, "power_w": 100.0, "samples": 1}
    assert clock.over([(5.0, 6.0)]) is None


def test_each_operators_part_of_a_comparison_is_its_own():
    """Runs of one operator each into one folder: compare.json is the last run's, and each
    operator's own file keeps its rows and seconds (an earlier run's softmax file overwrote RMSNorm's
    and GEMM's seconds)."""
    res = {"device": "H100", "command": "x", "rows": [{"operator": "rmsnorm", "shape": "a"},
                                                      {"operator": "gemm", "shape": "b"},
                                                      {"operator": "rmsnorm", "shape": "c"}],
           "seconds": {"rmsnorm": {"template": 1.0}, "gemm": {"template": 2.0}}}
    part = operator_part(res, "rmsnorm")
    assert part == {"device": "H100", "command": "x", "rows": [{"operator": "rmsnorm", "shape": "a"},
                                                               {"operator": "rmsnorm", "shape": "c"}],
                    "seconds": {"rmsnorm": {"template": 1.0}}}
    assert len(res["rows"]) == 3 and set(res["seconds"]) == {"rmsnorm", "gemm"}  # the whole run unchanged
