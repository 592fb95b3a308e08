"""The candidate driver's operator watch (a library passthrough seen by what runs) and its reading
of the profiler's records."""
import contextlib
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from ablate.evaluate._watch import OpWatch, _recorded

ROOT = Path(__file__).resolve().parents[3]
RMSNORM_OPS = ("aten::rms_norm", "aten::_fused_rms_norm")  # RMSNorm's own (its library_ops: every normalisation)
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


def test_an_in_place_variant_of_a_library_operator_is_seen():
    """Tensor.addmm_ records aten::addmm_, a name of its own, for aten::addmm's kernel."""
    watch = OpWatch(("aten::addmm",))
    with watch.watch():
        torch.zeros(8, 8).addmm_(x[:, :8], torch.eye(8))
    assert watch.seen == ["aten::addmm_"]


def test_the_kernels_own_arithmetic_is_not_a_library_operator():
    watch = OpWatch(RMSNORM_OPS)
    with watch.watch():
        xf = x.float()
        (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w).to(x.dtype)
    assert watch.seen == []


def test_the_raw_reading_names_what_key_averages_names():
    """_recorded reads the profiler's raw records rather than key_averages (8-17 times the cost);
    it must name every operator key_averages would, on every thread, or a passthrough goes unseen."""
    prof = torch.profiler
    cfg = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    with prof.profile(activities=[prof.ProfilerActivity.CPU], experimental_config=cfg) as p:
        torch.nn.functional.rms_norm(x, (64,), w)
        _in_thread()
        t = threading.Thread(target=lambda: torch.softmax(x, -1))
        t.start()
        t.join()
        torch.nn.functional.layer_norm(x, (64,))
    seen, kernels = _recorded(p.profiler.kineto_results)
    assert {"aten::rms_norm", "aten::_softmax", "aten::native_layer_norm"} <= seen
    assert {e.key for e in p.key_averages()} <= seen
    assert kernels == []  # a profile of the CPU alone records no device kernel


@pytest.mark.parametrize("how", ["stopped", "restarted", "toggled"])
def test_a_watch_whose_profiler_was_stopped_or_restarted_mid_batch_says_so(how):
    """The defence behind the sealed switches: a kernel that reached them anyway (a route the
    guard does not see) and stopped the driver's profiler, stopped it and started a fresh one, or
    paused its collection of CPU operators around a library call, leaves a record without the
    batch's start or end marker (turning collection back on fails on this torch)."""
    C = torch._C._autograd
    cpu = {torch._C._profiler.ProfilerActivity.CPU}
    watch = OpWatch(RMSNORM_OPS)
    with watch.watch():
        if how == "toggled":
            C._toggle_collection_dynamic(False, cpu)
        else:
            C._disable_profiler()
        torch.nn.functional.rms_norm(x, (64,), w)
        if how == "restarted":
            C._prepare_profiler(watch.config, watch.activities)
            C._enable_profiler(watch.config, watch.activities)
        if how == "toggled":
            with contextlib.suppress(RuntimeError):
                C._toggle_collection_dynamic(True, cpu)
    assert watch.tampered is not None and "aten::rms_norm" not in watch.seen
    fresh = OpWatch(RMSNORM_OPS)
    with fresh.watch():
        torch.nn.functional.rms_norm(x, (64,), w)
    assert fresh.tampered is None and "aten::rms_norm" in fresh.seen  # the profiler works again


def test_sealed_switches_refuse_every_name_and_the_watch_still_runs():
    """In a candidate the switches are the watch's alone: torch's names for them (the C module's,
    torch.autograd's, the profiler module's, and a later `from ... import`) refuse, while the
    watch, holding the real ones, still sees a library call, and a redispatched one is refused. In a fresh
    interpreter: sealing is for the candidate process's whole life."""
    code = (
        "import torch\n"
        "from ablate.evaluate._watch import OpWatch, seal_switches\n"
        "real = seal_switches(torch)\n"
        "from torch.autograd import _enable_record_function as late\n"
        "refused = 0\n"
        "for f in (torch._C._autograd._disable_profiler, torch.autograd.profiler._disable_profiler,\n"
        "          torch.autograd._enable_record_function, torch._C._autograd._clear_callbacks, late,\n"
        "          torch._C._autograd._toggle_collection_dynamic):\n"
        "    try:\n"
        "        f()\n"
        "    except PermissionError:\n"
        "        refused += 1\n"
        "watch = OpWatch(('aten::rms_norm',), real)\n"
        "with watch.watch():\n"
        "    torch.nn.functional.rms_norm(torch.randn(4, 8), (8,))\n"
        "print(refused, watch.seen, watch.tampered)\n"
        "op, cpu = torch.ops.aten._fused_rms_norm.default, torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)\n"
        "watch = OpWatch(('aten::_fused_rms_norm',), real)\n"
        "with watch.watch():\n"
        "    try:\n"
        "        op.redispatch(cpu, torch.randn(4, 8), [8], None, 1e-6)\n"
        "    except PermissionError:\n"
        "        print('refused', end=' ')\n"
        "    torch.ops.aten.mul.Tensor.redispatch(cpu, torch.ones(2), torch.ones(2))\n"
        "    fn = torch._C._dispatch_get_computed_kernel_for_dispatch_key('aten::_fused_rms_norm', cpu.highestPriorityTypeId())\n"
        "    try:\n"
        "        fn.call_boxed(cpu, torch.randn(4, 8), [8], None, 1e-6)\n"
        "    except PermissionError:\n"
        "        print('refused', end=' ')\n"
        "print(watch.seen, watch.tampered)\n"
        # a kernel for a dispatch key (OpOverload._op_dk): an overload made before sealing (torch's
        # import makes aten's), and one of an operator defined after it
        "lib = torch.library.Library('t', 'DEF')\n"
        "lib.define('g(Tensor x) -> Tensor')\n"
        "lib.impl('g', lambda x: x * 2, 'CPU')\n"
        "watch = OpWatch(('aten::mm', 't::g'), real)\n"
        "a, key = torch.randn(4, 3), torch._C.DispatchKey.CPU\n"
        "with watch.watch():\n"
        "    for call in (lambda: torch.ops.aten.mm.default._op_dk(key, a, a.t()),\n"
        "                 lambda: torch.ops.t.g.default._op_dk(key, a)):\n"
        "        try:\n"
        "            call()\n"
        "        except PermissionError:\n"
        "            print('refused', end=' ')\n"
        "    torch.ops.aten.add.Tensor._op_dk(key, a, a)\n"
        "print(sorted(watch.seen), watch.tampered)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    # the library call seen; a switch called (and refused) is the kernel's attempt, said
    assert out.stdout.split("\n")[0] == ("6 ['aten::rms_norm'] the kernel called torch's profiler switch "
                                         "_disable_profiler, the operator watch's own"), out.stdout
    # a redispatch (the dispatcher records none) of a watched operator is refused and seen; of any
    # other (a custom operator's autograd redispatches) it goes on
    assert out.stdout.split("\n")[1].startswith("refused refused ['aten::_fused_rms_norm']"), out.stdout
    # so is an operator's kernel run for a dispatch key, whenever its overload was made
    assert out.stdout.split("\n")[2].startswith("refused refused ['aten::mm', 't::g']"), out.stdout


class _Event:
    """One profiler record, as _recorded reads it: an operator (CPU) or a device kernel, linked to
    the operator that launched it by correlation id (0: launched by none, as a graph replay is)."""

    def __init__(self, name, on_device=False, corr=0, linked=0):
        self._name, self.on_device, self.corr, self.linked = name, on_device, corr, linked

    def name(self):
        return self._name

    def device_type(self):
        return torch.autograd.DeviceType.CUDA if self.on_device else torch.autograd.DeviceType.CPU

    def correlation_id(self):
        return self.corr

    def linked_correlation_id(self):
        return self.linked


class _Result:
    def __init__(self, events):
        self._events = events

    def events(self):
        return self._events


def test_each_device_kernel_is_named_once_with_the_operator_that_launched_it():
    # the profiler's own records and the runtime's calls are numbered apart from the operators: on an
    # H100 (torch 2.11) a buffer request, listed after them, carried a launching operator's id
    result = _Result([_Event("aten::mm", corr=11), _Event("aten::copy_", corr=12), _Event("cudaLaunchKernel", corr=12),
                      _Event("Activity Buffer Request", corr=11),
                      _Event("nvjet_tst_128x256_NNT", True, linked=11), _Event("vectorized_copy", True, linked=12),
                      _Event("sm90_gemm_replayed", True, linked=0), _Event("nvjet_tst_128x256_NNT", True, linked=0)])
    names, kernels = _recorded(result)
    assert names == {"aten::mm", "aten::copy_", "Activity Buffer Request", "cudaLaunchKernel"}
    assert kernels == [("nvjet_tst_128x256_NNT", "aten::mm"), ("vectorized_copy", "aten::copy_"),
                       ("sm90_gemm_replayed", None)]  # a replay: launched by no operator
    assert _recorded(result, known={"nvjet_tst_128x256_NNT", "vectorized_copy"})[1] == [("sm90_gemm_replayed", None)]


def _device_watch(events, library_kernels, library_ops=()):
    """An OpWatch recording a device's kernels, fed `events` (plus its own markers) by a profiler
    stand-in: this CPU has no CUPTI."""
    from ablate.evaluate._watch import Sealed

    marks = []

    @contextlib.contextmanager
    def mark(name):
        marks.append(name)
        yield

    mark.names = marks

    def disable():
        return _Result([_Event(m) for m in marks[-2:]] + list(events))

    switches = {"_prepare_profiler": lambda *a: None, "_enable_profiler": lambda *a: None,
                "_disable_profiler": disable}
    watch = OpWatch(library_ops, Sealed(switches), "cpu", kernels=library_kernels)
    watch.on_device, watch.mark = True, mark
    return watch


def test_a_library_kernel_the_device_ran_is_a_passthrough_however_it_was_launched():
    """A kernel the task's library runs inside its library operator (the library process recorded
    it), run on the device for the candidate with no operator dispatched (a CUDA graph captured
    where no watch ran, replayed), is a library passthrough; the kernel's own kernels are not."""
    events = [_Event("aten::copy_", corr=3), _Event("own_rmsnorm_kernel", True, linked=0),
              _Event("vectorized_layer_norm_kernel", True, linked=0)]
    watch = _device_watch(events, {"vectorized_layer_norm_kernel": "torch_F.rms_norm"})
    with watch.watch():
        pass
    found = watch.findings()
    assert "vectorized_layer_norm_kernel (torch_F.rms_norm)" in found["library_passthrough"]
    assert "driver_tampered" not in found
    assert watch.take_kernels() == [["own_rmsnorm_kernel", None], ["vectorized_layer_norm_kernel", None]]
    with watch.watch():  # the next batch: nothing new to name
        pass
    assert watch.take_kernels() == []
    watch.forget_kernels()  # the library process switching libraries: each names its own afresh
    with watch.watch(on=False):  # a library's warm-up call on a shape (compiling, autotuning): no profile
        pass
    assert watch.take_kernels() == []
    with watch.watch():
        pass
    assert [k for k, _ in watch.take_kernels()] == ["own_rmsnorm_kernel", "vectorized_layer_norm_kernel"]


def test_a_library_kernel_in_another_instantiation_or_precision_is_still_the_librarys():
    """The libraries ran one instantiation of each kernel on the task's shapes; a candidate
    replaying another (layer norm's kernel without its RMS flag, on [x, -x]; cuBLAS's float32 GEMM
    instead of its bf16 one, picked by shape and precision) runs the same library all the same."""
    from ablate.operators._library_ops import MATMUL_OPS, NORMALISATION_OPS

    norm = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, {}>(int)"
    watch = _device_watch([_Event(norm.format("false"), True), _Event("_rmsnorm", True)],
                          {norm.format("true"): "torch_F.rms_norm"}, NORMALISATION_OPS)
    with watch.watch():
        pass
    assert "vectorized_layer_norm_kernel<c10::BFloat16, float, false>(int) (torch_F.rms_norm)" in (
        watch.findings()["library_passthrough"])
    fp32 = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_cublas"
    own = [_Event("matmul_kernel", True), _Event("Memset (Device)", True),
           _Event("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)", True)]
    watch = _device_watch([*own, _Event(fp32, True)], {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT": "torch_matmul"},
                          MATMUL_OPS)
    with watch.watch():
        pass
    assert f"{fp32} (cuBLAS's or cuDNN's matrix product kernel)" in watch.findings()["library_passthrough"]
    clean = _device_watch(own, {}, MATMUL_OPS)  # its own kernel, a memset, a fill: anyone's
    with clean.watch():
        pass
    assert clean.findings() == {} and len(clean.take_kernels()) == 3


def test_a_batch_running_only_its_own_kernels_is_clean_and_names_them_at_most_a_report_at_a_time():
    from ablate.evaluate._watch import KERNELS_PER_REPORT

    many = [_Event(f"own_kernel_{i}", True) for i in range(KERNELS_PER_REPORT + 5)]
    watch = _device_watch(many, {"cunn_SoftMaxForward": "torch_softmax"})
    with watch.watch():
        pass
    assert watch.findings() == {}
    assert len(watch.take_kernels()) == KERNELS_PER_REPORT and len(watch.take_kernels()) == 5


def test_a_library_kernel_behind_a_flood_of_new_kernels_is_still_seen_in_its_batch():
    """A report names at most KERNELS_PER_REPORT new kernels, the rest later: a kernel launching
    many kernels of its own first, so the library's falls past the last report, is checked all the same."""
    from ablate.evaluate._watch import KERNELS_PER_REPORT

    flood = [_Event(f"own_kernel_{i}", True) for i in range(3 * KERNELS_PER_REPORT)]
    watch = _device_watch([*flood, _Event("nvjet_sm90_tst_256x128", True)], {"nvjet_sm90_tst_256x128": "cublas"})
    with watch.watch():
        pass
    assert "nvjet_sm90_tst_256x128 (cublas)" in watch.findings()["library_passthrough"]
    assert len(watch.take_kernels()) == KERNELS_PER_REPORT


def _padded_watch(monkeypatch, lose: list, own_fills: int = 0):
    """A device watch whose profiler stand-in records each session's padding as CUPTI would, less
    its first lose[0] kernel records (pytorch/pytorch#192021 drops a session's head); the kernel
    then runs own_fills fills of its own. Returns (the watch, the fills each session padded)."""
    from ablate.evaluate import _watch

    monkeypatch.setattr(_watch, "_padding", [_watch.PADDING_MIN])
    watch, padded, launched = _device_watch([], {}), [], []
    watch.fill_ = lambda t, v: launched.append("fill")
    watch.bitwise_not_ = lambda t: launched.append("sentinel")
    marks = watch.mark

    def disable():
        ops, kernels = [], []
        for i, what in enumerate(launched, start=1):  # the profiler numbers operators in order
            ops += [_Event("aten::fill_" if what == "fill" else "aten::bitwise_not_", corr=i)]
            kernels += [_Event("vectorized_elementwise_kernel<FillFunctor>" if what == "fill"
                               else "vectorized_elementwise_kernel<bitwise_not>", True, linked=i)]
        padded.append(launched.count("fill") - own_fills)
        launched.clear()
        return _Result([_Event(m) for m in marks.names[-2:]] + ops + kernels[lose[0]:])

    watch.sealed.switches["_disable_profiler"] = disable
    return watch, padded, launched


def test_a_device_session_opens_with_padding_sized_by_the_loss_seen_and_says_when_it_lost_its_sentinel(monkeypatch):
    """A device watch starts each session with fills of its own, then its sentinel kernel: CUPTI may
    lose a session's first kernel records, more as the process goes on (pytorch/pytorch#192021),
    and the fills take that loss. The next session pads twice the fills lost plus PADDING_MIN, so a
    machine that loses nothing pays PADDING_MIN a session however long the process lives (the
    library process's padding grew by one each session before). A session that lost its sentinel
    too counts in `lost` (the judge's `device_watch_incomplete`) and doubles the padding."""
    from ablate.evaluate import _watch

    lose = [0]
    watch, padded, launched = _padded_watch(monkeypatch, lose)
    for _ in range(50):  # a long-lived process losing nothing: the padding stays at its least
        with watch.watch():
            pass
    assert padded == [_watch.PADDING_MIN] * 50 and watch.lost == 0 and watch.padding_lost == 0
    for loss, pads in ((3, _watch.PADDING_MIN), (4, _watch.PADDING_MIN + 6), (5, _watch.PADDING_MIN + 8)):
        lose[0] = loss  # a growing loss, taken by the padding: nothing missed, nothing flagged
        with watch.watch():
            pass
        assert padded[-1] == pads and watch.lost == 0
    assert watch.padding_lost == 12 and _watch._padding[0] == _watch.PADDING_MIN + 10
    lose[0] = 100  # past the padding and the sentinel: said, and the padding doubled
    with watch.watch():
        pass
    assert watch.lost == 1 and _watch._padding[0] == 2 * (_watch.PADDING_MIN + 10) and watch.findings() == {}
    monkeypatch.setattr(_watch, "_padding", [_watch.PADDING_MAX])
    lose[0] = 10 * _watch.PADDING_MAX
    with watch.watch():
        pass
    assert padded[-1] == _watch.PADDING_MAX and watch.lost == 2 and _watch._padding[0] == _watch.PADDING_MAX  # capped


def test_a_kernels_own_fills_do_not_pass_for_the_padding(monkeypatch):
    """The padding's fills are those before the sentinel: a kernel launching fills of its own, after
    it, cannot make a lost padding look recorded and so shrink the next session's padding below
    the loss (its records would then go unseen)."""
    from ablate.evaluate import _watch

    lose = [6]
    watch, padded, launched = _padded_watch(monkeypatch, lose, own_fills=20)
    with watch.watch():
        launched.extend(["fill"] * 20)
    assert watch.padding_lost == 6 and _watch._padding[0] == _watch.PADDING_MIN + 12


def test_a_sentinel_whose_kernel_was_not_recorded_is_a_lost_session(monkeypatch):
    """The sentinel's operator ran, its kernel's record did not come: CUPTI's loss, said apart from
    anything the kernel did."""
    from ablate.evaluate import _watch

    monkeypatch.setattr(_watch, "_padding", [_watch.PADDING_MIN])
    sentinel = [_Event("aten::bitwise_not_", corr=40), _Event("vectorized_elementwise_kernel<bitwise_not>", True, linked=0)]
    unlinked = _device_watch(sentinel, {})
    unlinked.fill_ = unlinked.bitwise_not_ = lambda *a: None
    with unlinked.watch():
        pass
    assert unlinked.lost == 1 and unlinked.findings() == {}


@pytest.mark.gpu
def test_a_late_watch_still_records_every_kernel_its_batch_ran():
    """Some CUPTI versions corrupt the timestamps of a session's first kernel records, more each
    session torch's profiler starts (pytorch/pytorch#192021), and the profiler drops them: a watch
    started once a batch would then miss the first kernels of every later batch, a library's
    among them. The padding counts its own fills on the device's real records (the profiler's
    operator numbering and links): where nothing was lost, it counts none lost."""
    from ablate.evaluate import _watch
    from benchmarks.watch_cost import sessions

    watch = OpWatch(RMSNORM_OPS, device="cuda")
    got = sessions(watch, torch.randn(64, 64, device="cuda"), 60)
    assert got["kernels_a_session"] == 4
    assert got["missed"] == [] and got["lost"] == 0, got
    if not got["raw_missed"]:  # CUPTI lost nothing here: the padding's own count says so, and it stayed least
        assert got["padding_lost"] == 0 and got["padding"] == _watch.PADDING_MIN, got
