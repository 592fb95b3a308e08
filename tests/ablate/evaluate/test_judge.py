"""The judge's plan of a shape: a problem gets one draw per distribution past LARGE_BYTES, and one
too large for the device is refused with one line before anything is allocated; a timed batch
holds as many calls as the device's memory allows."""
import os
from types import SimpleNamespace

import pytest

from ablate.evaluate._judge import LARGE_BYTES, NEEDS, Evaluation, TooLarge
from ablate.evaluate._shape import MAX_CALLS, batch_calls

GiB = 1 << 30


def plan(moved: int, memory: int | None = 141 * GiB, draws: int = 3):
    ev = object.__new__(Evaluation)
    ev.cfg = {"draws": draws}
    ev.op = SimpleNamespace(name="op", bytes=lambda s: moved)
    ev.device = "cuda" if memory else "cpu"
    ev.info = {"memory_bytes": memory}
    return ev.plan({"N": 1})


def test_an_ordinary_problem_gets_every_draw():
    assert len({d for _, d in plan(256 << 20)["sets"]}) == 3


def test_a_large_problem_gets_one_draw():
    assert {d for _, d in plan(12 * GiB)["sets"]} == {0}  # KernelBench 19_ReLU: 6 GiB in, 6 GiB out
    assert {d for _, d in plan(LARGE_BYTES + 1, memory=None)["sets"]} == {0}


def test_a_problem_too_large_for_the_device_is_refused_in_one_line():
    with pytest.raises(TooLarge) as e:
        plan(int(0.85 * 141 * GiB / NEEDS) + GiB)
    assert "\n" not in str(e.value) and "GiB of the device's 141 GiB" in str(e.value)


def test_a_batch_holds_what_memory_allows():
    ev = SimpleNamespace(op=SimpleNamespace(bytes=lambda s: 256 << 20), device="cuda", info={"memory_bytes": 141 * GiB})
    assert batch_calls(ev, {}, 10 ** 6) == min(MAX_CALLS, int(0.3 * 141 * GiB // (512 << 20)))
    ev.op = SimpleNamespace(bytes=lambda s: 30 * GiB)
    assert batch_calls(ev, {}, 10 ** 6) == 1  # one call at a time, never none
    ev.op = SimpleNamespace(bytes=lambda s: 4096)
    assert batch_calls(ev, {}, 10 ** 6) == MAX_CALLS  # a tiny problem: the launch queue bounds it


def test_a_busy_judge_ends_when_its_caller_is_killed(tmp_path):
    """A caller killed by a time limit must not leave its judge timing baselines on the GPU under
    the next program's timings: the judge watches its parent process, not its socket."""
    import os
    import signal
    import subprocess
    import sys
    import time

    busy = ("import os, sys, time; from ablate.evaluate._judge import exit_when_orphaned; "
            "exit_when_orphaned(int(sys.argv[1]), 0.05); time.sleep(120)")  # busy: never reads a socket
    caller = ("import os, subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', sys.argv[1], "
              "str(os.getpid())], start_new_session=True); print(p.pid, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", caller, busy], stdout=subprocess.PIPE, text=True)
    judge = int(parent.stdout.readline())
    time.sleep(0.5)
    assert os.path.exists(f"/proc/{judge}")  # alive while its caller is
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _running(judge):
        time.sleep(0.05)
    assert not _running(judge), "the judge outlived its killed caller"


def _running(pid: int) -> bool:
    from ablate.store import _process_start

    return _process_start(pid) is not None  # zombies count as gone


def test_the_judge_is_told_who_started_it():
    from ablate.evaluate import _servers

    j = _servers.Judge()
    try:
        assert j.proc.args[-1] == str(os.getpid()) and j.alive()
    finally:
        j.close()


def test_compiled_baselines_are_released_before_the_candidate_runs():
    """torch.compile's state (its CUDA graph pools on a GPU) goes before the candidate's run; a
    compiled function compiles afresh when called again."""
    import torch
    import torch._dynamo
    import torch._inductor.cudagraph_trees  # noqa: F401

    from ablate.evaluate._judge import _release_compiled

    compiles = []

    def backend(gm, example_inputs):
        compiles.append(1)
        return gm.forward

    fn = torch.compile(lambda x: x + 1, backend=backend)
    fn(torch.ones(2))
    fn(torch.ones(2))
    assert len(compiles) == 1
    _release_compiled()
    assert torch.equal(fn(torch.ones(2)), torch.full((2,), 2.0))
    assert len(compiles) == 2  # compiled afresh: dynamo's caches were reset


@pytest.mark.gpu
def test_a_cuda_graph_pool_of_a_compiled_baseline_is_released():
    """torch.compile with CUDA graphs (max-autotune and reduce-overhead record them) keeps the
    graph's memory pool; the judge hands it back before the candidate runs, as gc and
    empty_cache alone do not."""
    import torch

    from ablate.evaluate._judge import _release_compiled, _release_memory

    x = torch.randn(64 << 18, device="cuda")  # 64 MiB
    f = torch.compile(lambda a: (a * 2 + 1).sin(), mode="reduce-overhead")
    for _ in range(3):
        y = f(x)  # recorded into a CUDA graph on a later call: its pool holds the output
    del y
    _release_memory()
    pooled = torch.cuda.memory_reserved()
    _release_compiled()
    assert pooled - torch.cuda.memory_reserved() >= 64 << 20


def test_an_error_pass_given_up_for_the_eager_one_is_flagged(monkeypatch):
    """On a GPU the error statistics come from two Triton kernels, checked against the eager pass
    on their first chunk of each kind; one given up there leaves the statistics right (the eager
    pass answers) but is a bug to see: every result of the process says so."""
    from ablate.operators import _error_stats

    ev = object.__new__(Evaluation)
    notes = []
    ev.cfg, ev.shapes, ev.flags, ev.forged, ev.end = {"shape_set": "smoke", "draws": 3}, [], [], [], None
    ev.op, ev.info, ev.ceilings, ev.mode, ev.forbidden = SimpleNamespace(name="op"), {}, None, "none", []
    ev.candidate_start_s, ev.note = 0.0, notes.append
    assert "error_pass_eager" not in ev.assemble([], {}, set(), [], True)["flags"]
    monkeypatch.setattr(_error_stats, "GAVE_UP", {"float32": "the Triton pass raised RuntimeError: x"})
    assert "error_pass_eager" in ev.assemble([], {}, set(), [], True)["flags"]
    assert "float32: the Triton pass raised RuntimeError: x" in notes[-1]
