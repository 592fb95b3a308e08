"""The candidate driver's operator watch (a library passthrough seen by what runs) and its reading
of the profiler's records."""
import threading

import pytest
import torch

from ablate.evaluate._watch import OpWatch, _recorded

RMSNORM_OPS = ("aten::rms_norm", "aten::_fused_rms_norm")  # operators/rmsnorm's library_ops
x, w = torch.randn(8, 64), torch.ones(64)


def _in_thread():
    t = threading.Thread(target=lambda: torch.nn.functional.rms_norm(x, (64,), w))
    t.start()
    t.join()


SPELLINGS = {
    "functional": lambda: torch.nn.functional.rms_norm(x, (64,), w),
    "module": lambda: torch.nn.RMSNorm(64)(x),
    "aten": lambda: torch.ops.aten.rms_norm(x, [64], w, 1e-6),
    "getattr": lambda: getattr(torch.nn.functional, "rms" + "_norm")(x, (64,), w),
    "worker_thread": _in_thread,
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_a_library_operator_is_seen_however_it_is_called(spelling):
    watch = OpWatch(RMSNORM_OPS)
    with watch.watch():
        (x * 2).sum()
        SPELLINGS[spelling]()
    assert "aten::rms_norm" in watch.seen and set(watch.seen) <= set(RMSNORM_OPS)
    assert watch.threads  # this torch records every thread


def test_the_kernels_own_arithmetic_is_not_a_library_operator():
    watch = OpWatch(RMSNORM_OPS)
    with watch.watch():
        xf = x.float()
        (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(x.dtype)
    assert watch.seen == []


def test_the_raw_reading_names_what_key_averages_names():
    """_recorded reads the profiler's raw records rather than key_averages (20 times the cost); it
    must name every operator key_averages would, on every thread, or a passthrough goes unseen."""
    prof = torch.profiler
    cfg = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    with prof.profile(activities=[prof.ProfilerActivity.CPU], experimental_config=cfg) as p:
        torch.nn.functional.rms_norm(x, (64,), w)
        _in_thread()
        t = threading.Thread(target=lambda: torch.softmax(x, -1))
        t.start()
        t.join()
        torch.nn.functional.layer_norm(x, (64,))
    seen = _recorded(p)
    assert {"aten::rms_norm", "aten::_softmax", "aten::native_layer_norm"} <= seen
    assert {e.key for e in p.key_averages()} <= seen


def test_a_profile_without_raw_records_is_read_through_key_averages():
    class Profile:  # what a torch whose profiler keeps no raw results hands back
        profiler = None

        def key_averages(self):
            return [type("Event", (), {"key": "aten::rms_norm"})()]

    assert _recorded(Profile()) == {"aten::rms_norm"}
