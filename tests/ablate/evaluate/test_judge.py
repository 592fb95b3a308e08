"""The judge's memory plan: a problem gets fewer input sets as it grows, and one too large for the
device is refused with one line before anything is allocated."""
from types import SimpleNamespace

import pytest

from ablate.evaluate._judge import LARGE_BYTES, Evaluation, TooLarge

GiB = 1 << 30


def plan(moved: int, memory: int | None = 141 * GiB, draws: int = 3):
    ev = object.__new__(Evaluation)
    ev.cfg = {"draws": draws}
    ev.op = SimpleNamespace(name="op", bytes=lambda s: moved)
    ev.device = "cuda" if memory else "cpu"
    ev.info = {"memory_bytes": memory}
    return ev.plan({"N": 1})


def test_an_ordinary_problem_gets_every_draw_and_four_timing_sources():
    p = plan(256 << 20)
    assert len({d for _, d in p["sets"]}) == 3 and len(p["sources"]) == 4


def test_a_large_problem_gets_one_draw_and_fewer_timing_sources():
    p = plan(12 * GiB)  # KernelBench 19_ReLU: 6 GiB in, 6 GiB out
    assert {d for _, d in p["sets"]} == {0} and 2 <= len(p["sources"]) <= 4
    assert plan(LARGE_BYTES + 1, memory=None)["sources"]  # on a CPU no device budget applies


def test_a_problem_too_large_for_the_device_is_refused_in_one_line():
    with pytest.raises(TooLarge) as e:
        plan(40 * GiB)
    assert "\n" not in str(e.value) and "GiB of the device's 141 GiB" in str(e.value)
