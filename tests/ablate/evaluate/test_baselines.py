"""A library's time is cached and decides every ratio on its device: it is timed until two runs
agree (ablate.evaluate._baselines.settled), so one run disturbed by another process cannot make
the library look slow for good."""
import os
from types import SimpleNamespace

import pytest
import torch

from ablate.evaluate._baselines import AGREE, MAX_RUNS, measure, settled


def test_two_runs_that_agree_settle_it_at_the_smaller():
    assert settled([]) is None and settled([1.0]) is None
    assert settled([1.0, 1.0 + AGREE / 2]) == 1.0
    assert settled([1.4, 1.0]) is None  # a disturbed run: measure again
    assert settled([1.4, 1.0, 1.01]) == 1.0
    assert settled([1.0, 2.0, 3.0, 4.0][:MAX_RUNS]) == 1.0  # never agreeing: the smallest, after MAX_RUNS


def _measure(times, device="cuda"):
    ev = SimpleNamespace(device=device, cfg={}, ceilings=None)
    seq = iter(times)
    return measure(ev, {"M": 1}, "lib", timer=lambda: next(seq), probe=lambda: None)


def test_a_disturbed_timing_run_is_measured_again_and_left_out():
    # 1.40 ms: the run another process disturbed; the next two agree
    out = _measure([1.40, 1.00, 1.01])
    assert out["ms"] == pytest.approx(1.00) and out["runs"] == [1.40, 1.00, 1.01] and "noisy" not in out


def test_runs_that_never_agree_are_flagged_noisy():
    out = _measure([1.0, 1.5, 2.0, 2.6, 9.9])
    assert out["ms"] == 1.0 and len(out["runs"]) == MAX_RUNS and out["noisy"] is True


def test_on_a_cpu_one_run_is_enough():  # the interpreter's clock is labelled, never compared
    out = _measure([3.0, 9.0], device="cpu")
    assert out["ms"] == 3.0 and out["runs"] == [3.0]


def test_an_entry_says_how_long_its_runs_took():  # where a cold setup goes, library by library
    import time

    def run():
        time.sleep(0.05)
        return 1.0

    ev = SimpleNamespace(device="cuda", cfg={}, ceilings=None)
    out = measure(ev, {"M": 1}, "lib", timer=run, probe=lambda: None)
    assert out["runs"] == [1.0, 1.0] and out["seconds"] >= 0.1


def test_a_library_that_raises_is_reported_not_fatal():
    ev = SimpleNamespace(device="cuda", cfg={}, ceilings=None)
    out = measure(ev, {"M": 1}, "lib", timer=lambda: 1 / 0, probe=lambda: None)
    assert out["error"].startswith("raised ZeroDivisionError")


def test_a_change_to_the_code_that_draws_the_inputs_measures_the_baselines_again(tmp_path, monkeypatch):
    """The cache key of a baseline's time and envelope (operator_hash) covers the operator's own
    folder, the shared input distributions and, for an external format, its adapter."""
    import shutil
    from pathlib import Path

    from ablate import operators
    from ablate.evaluate._baselines import operator_hash
    from ablate.operators import kernelbench

    data = Path(__file__).parents[2] / "operators" / "data" / "kernelbench"
    [op] = kernelbench.load(data, 1, ["3"])
    node = dict(op.source)
    fake = tmp_path / "operators"
    fake.mkdir()
    for name in ("__init__.py", "_inputs.py", "kernelbench.py"):
        shutil.copy(Path(operators.__file__).parent / name, fake / name)
    monkeypatch.setattr(operators, "__file__", str(fake / "__init__.py"))
    first = operator_hash(op, node)
    assert operator_hash(op, node) == first
    (fake / "kernelbench.py").write_text((fake / "kernelbench.py").read_text() + "\n# drawn elsewhere now\n")
    second = operator_hash(op, node)
    (fake / "_inputs.py").write_text((fake / "_inputs.py").read_text() + "\n# another distribution\n")
    assert len({first, second, operator_hash(op, node)}) == 3


def test_a_gpu_found_shared_after_a_librarys_runs_is_said_in_its_entry():
    # two runs slowed alike by another process agree, so settling alone would keep them
    ev = SimpleNamespace(device="cuda", cfg={}, ceilings=None)
    out = measure(ev, {"M": 1}, "lib", timer=lambda: 1.30, probe=lambda: "another process is using the GPU")
    assert out["ms"] == 1.30 and out["contended"] == "another process is using the GPU"
    out = measure(ev, {"M": 1}, "lib", timer=lambda: 1.00, probe=lambda: None)
    assert "contended" not in out


def test_a_load_that_ends_before_the_runs_end_is_seen_by_the_probe_before_them():
    ev = SimpleNamespace(device="cuda", cfg={}, ceilings=None)
    probes = iter(["another process is using the GPU", None])  # before the runs, then after them
    out = measure(ev, {"M": 1}, "lib", timer=lambda: 1.30, probe=lambda: next(probes))
    assert out["contended"] == "another process is using the GPU"


def _cuda_judge(baselines, ceilings=None):
    return SimpleNamespace(device="cuda", op=SimpleNamespace(name="op", baselines=baselines), note=lambda m: None,
                           unavailable={name: b.unavailable() for name, b in baselines.items()},
                           info={"name": "GPU", "driver": "1"}, libs={}, op_hash="h", mode="judge-clock",
                           ceilings=ceilings, input_set=lambda shape, k, references=True: ((torch.ones(2),), None, None))


def test_a_time_taken_on_a_shared_gpu_is_used_once_and_not_cached(tmp_path, monkeypatch):
    from ablate.evaluate import _baselines

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    times = iter([{"ms": 1.3, "runs": [1.3, 1.3], "contended": "shared", "seconds": 0.1},
                  {"ms": 1.0, "runs": [1.0, 1.0], "seconds": 0.1},
                  {"ms": 1.0, "runs": [1.0, 1.0], "seconds": 0.1}])
    monkeypatch.setattr(_baselines, "measure", lambda ev, shape, name: next(times))
    lib = SimpleNamespace(needs_cuda=False, unavailable=lambda: None)
    ev = _cuda_judge({"lib": lib})
    shape = {"M": 2, "dtype": "float32"}
    first = _baselines.for_shape(ev, shape, {})
    assert first["ms"] == {"lib": 1.3} and first["contended"] == {"lib": "shared"}
    second = _baselines.for_shape(ev, shape, {})  # timed again: nothing was kept from the shared GPU
    assert second["ms"] == {"lib": 1.0} and second["contended"] == {}
    third = _baselines.for_shape(ev, shape, {})  # and the undisturbed time is kept
    assert third["ms"] == {"lib": 1.0} and next(times)["ms"] == 1.0  # the third measurement was never asked for


def _ceilings(tmp_path, monkeypatch, canary_then, canary_now, notes):
    from ablate.evaluate import _baselines

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    info = {"name": "GPU", "driver": "1", "torch": "2"}
    measured = []

    def measure():
        measured.append(1)
        return {"copy_gbps": 4000.0, "canary_gbps": canary_then if len(measured) == 1 else canary_now}

    first = _baselines.ceilings(info, notes.append, measure, rate=lambda: canary_then)
    again = _baselines.ceilings(info, notes.append, measure, rate=lambda: canary_now)
    return first, again, len(measured)


def test_ceilings_cached_while_another_process_used_the_gpu_are_measured_again(tmp_path, monkeypatch):
    """Ceilings measured under a foreign load cache a slow canary, the reference of every later
    contention check, which would then pass a GPU as slow as that load for good."""
    notes = []
    first, again, measured = _ceilings(tmp_path, monkeypatch, 2000.0, 3000.0, notes)
    assert measured == 2 and again["canary_gbps"] == 3000.0 and again["id"] != first["id"]
    assert "another process was using the GPU then" in notes[-2]


def test_ceilings_are_kept_while_the_canary_runs_as_it_did(tmp_path, monkeypatch):
    notes = []
    first, again, measured = _ceilings(tmp_path, monkeypatch, 2800.0, 3000.0, notes)  # within contention's margin
    assert measured == 1 and again == first
    _, slower, measured = _ceilings(tmp_path / "b", monkeypatch, 3000.0, 1500.0, notes)  # a load now: contention's case
    assert measured == 1 and slower["canary_gbps"] == 3000.0


def test_baselines_timed_beside_ceilings_measured_again_are_timed_again(tmp_path, monkeypatch):
    from ablate.evaluate import _baselines

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    times = iter([{"ms": 1.3, "runs": [1.3, 1.3], "seconds": 0.1}, {"ms": 1.0, "runs": [1.0, 1.0], "seconds": 0.1}])
    monkeypatch.setattr(_baselines, "measure", lambda ev, shape, name: next(times))
    lib = SimpleNamespace(needs_cuda=False, unavailable=lambda: None)
    shape = {"M": 2, "dtype": "float32"}
    assert _baselines.for_shape(_cuda_judge({"lib": lib}, {"id": "a"}), shape, {})["ms"] == {"lib": 1.3}
    assert _baselines.for_shape(_cuda_judge({"lib": lib}, {"id": "a"}), shape, {})["ms"] == {"lib": 1.3}  # cached
    assert _baselines.for_shape(_cuda_judge({"lib": lib}, {"id": "b"}), shape, {})["ms"] == {"lib": 1.0}


def test_a_canary_that_cannot_run_at_the_start_keeps_the_cached_ceilings(tmp_path, monkeypatch):
    from ablate.evaluate import _baselines

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    info, measured = {"name": "GPU", "driver": "1", "torch": "2"}, []
    measure = lambda: measured.append(1) or {"canary_gbps": 3000.0}  # noqa: E731
    first = _baselines.ceilings(info, lambda m: None, measure)

    def full():
        raise RuntimeError("CUDA out of memory")

    assert _baselines.ceilings(info, lambda m: None, measure, rate=full) == first and len(measured) == 1


def test_a_librarys_kernels_are_those_its_library_operators_launched_but_plain_tensor_work():
    """What the library process saw the device run for a baseline: the kernels a library operator
    of the task launched itself count (the candidate's watch refuses them); a copy or a fill inside
    one, work of another operator, or a launch by no operator (a Triton library's own) do not."""
    from ablate.evaluate._baselines import library_kernels
    from ablate.operators._library_ops import MATMUL_OPS, NORMALISATION_OPS

    ran = [("nvjet_tst_256x128_64x4_2x1_v_bz_coopA_TNT", "aten::mm"), ("Memset (Device)", "aten::mm"),  # as on an H100
           ("Memcpy DtoD (Device -> Device)", "aten::mm"),
           ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "aten::addmm_"),  # an in-place variant: the same kernel
           ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "aten::mm"),
           ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>", "aten::copy_"),
           ("void at::native::reduce_kernel<512, 1>", "aten::sum"), ("_rms_norm_forward_kernel", None)]
    assert library_kernels(MATMUL_OPS, ran) == {"nvjet_tst_256x128_64x4_2x1_v_bz_coopA_TNT",
                                                "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"}
    assert library_kernels(NORMALISATION_OPS, ran) == set()


def test_every_shapes_library_kernels_go_to_the_candidate_with_their_library():
    from ablate.evaluate._judge import refused_kernels

    bases = [{"ms": {}, "kernels": {"torch_matmul": ["nvjet_a"]}}, None,
             {"ms": {}, "kernels": {"torch_matmul": ["nvjet_b"], "triton_matmul": []}}, {"ms": {}}]
    assert refused_kernels(bases) == {"nvjet_a": "torch_matmul", "nvjet_b": "torch_matmul"}


def _asking_judge(baselines, device="cpu"):
    """A judge whose library process answers which libraries can run, and records each ask."""
    asked = []

    def available(operator, node, names):
        asked.append(list(names))
        return {name: baselines[name].unavailable() for name in names}

    ev = _cuda_judge(baselines)
    ev.device, ev.cfg = device, {}
    ev.library = lambda: SimpleNamespace(available=available)
    return ev, asked


def test_which_libraries_can_run_is_asked_of_the_library_process_and_remembered(tmp_path, monkeypatch):
    """An optional library's check imports it (Liger's took 4-5 s of a judge's first evaluation on
    an H100): the library process asks, which imports it anyway to run it. A warm judge asks
    nothing (asking starts that process): a runnable library and one not installed are remembered
    (installing one changes the versions in the key); one installed that failed to load is asked
    again; needing CUDA on a CPU is known without asking."""
    from ablate.evaluate import _baselines

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    libs = {"plain": SimpleNamespace(needs_cuda=False, unavailable=lambda: None),
            "missing": SimpleNamespace(needs_cuda=False, unavailable=lambda: "missing-kernels not installed"),
            "broken": SimpleNamespace(needs_cuda=False, unavailable=lambda: "broken-kernels failed to import: x"),
            "gpu_only": SimpleNamespace(needs_cuda=True, unavailable=lambda: None)}
    ev, asked = _asking_judge(libs)
    first = _baselines.availability(ev)
    assert first == {"plain": None, "missing": "missing-kernels not installed",
                     "broken": "broken-kernels failed to import: x", "gpu_only": "needs CUDA"}
    assert asked == [["plain", "missing", "broken"]]
    again = _baselines.availability(ev)
    assert again == first and asked[1:] == [["broken"]]
    ev.libs = {"torch": "another version"}  # other versions (a library installed): asked afresh
    _baselines.availability(ev)
    assert asked[2:] == [["plain", "missing", "broken"]]


def test_every_optional_library_is_in_the_versions_of_the_cache_keys():
    """A library not installed is remembered under the versions' key: installing it must change
    the key, or it would stay "not installed" once it is there."""
    from ablate.evaluate._gpu import VERSIONED
    from ablate.operators._baselines import NOT_INSTALLED, OPTIONAL, missing

    assert set(OPTIONAL) <= set(VERSIONED)
    assert missing("no_such_module_here", "no-such-package")() == f"no-such-package {NOT_INSTALLED}"


def _library_judge(op_name: str, shape: dict):
    """The parts of a CPU judge that LibraryCalls uses, with the judge's own library process."""
    import types

    from ablate import operators
    from ablate.evaluate import _link

    ev = SimpleNamespace(op=operators.get(op_name), shapes=[shape], plans=[{}], cfg={}, device="cpu", torch=torch,
                         info={"name": "cpu", "driver": ""})
    ev.library = types.MethodType(_link.CandidateLink.library, ev)
    return ev


def test_a_librarys_outputs_for_its_envelope_come_from_the_library_process():
    """A compiled library was compiled twice, in the judge for its envelope and in the library
    process for its time: its outputs now come from the library process, read as a candidate's
    are, and equal the library called in place; a process that breaks is said, and the next
    call starts another."""
    from ablate import operators
    from ablate.evaluate import _link
    from ablate.evaluate._baselines import LibraryCalls

    shape = {"M": 16, "N": 256, "dtype": "bfloat16"}
    ev = _library_judge("rmsnorm", shape)
    op = operators.get("rmsnorm")
    ins = op.make_inputs(shape, 3, "cpu", "normal")
    try:
        with LibraryCalls(ev, shape) as call:
            for name in ("torch_eager", "torch_F.rms_norm"):
                (got,) = call(name, *ins)
                assert torch.equal(got, op.baselines[name].fn(*ins)), name
            pid = ev.library().proc.pid
            assert pid != os.getpid()
            with pytest.raises(RuntimeError, match="no_such_library|not|KeyError"):
                call("no_such_library", *ins)
            ev.library().proc.kill()
            ev.library().proc.wait()
            with pytest.raises(RuntimeError, match="broke|did not start|Closed"):
                call("torch_eager", *ins)  # the process it used is gone: said
            (got,) = call("torch_eager", *ins)  # and the next call starts another
            assert torch.equal(got, op.baselines["torch_eager"].fn(*ins)) and ev.library().proc.pid != pid
    finally:
        _link.discard_library("cpu")


def test_the_library_process_says_which_libraries_can_run():
    from ablate.evaluate._library import Library

    lib = Library("cpu")
    try:
        found = lib.available("rmsnorm", None, ["torch_eager", "no_such_library"])
        assert found == {"torch_eager": None, "no_such_library": "no such library"}
        found = lib.available("no_such_operator", None, ["torch_eager"])
        assert found["torch_eager"].startswith("operator not loaded")
    finally:
        lib.close()
