"""The evaluator on a CUDA GPU: honest Triton and CUDA (CuPy) kernels accepted with real timings,
and the exploits that only exist on a GPU rejected for their reason. Skipped without CUDA."""
import importlib.util

import pytest

# The first test of an operator times every library on a cold cache (torch.compile's max-autotune
# among them): on an H100 the first GEMM test took 276 s and passed, where a 240 s limit had cut it
# off (benchmarks/results/h100-evaluator-18-mirrors); the suite's 300 s must not decide that
pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1200)]

PUBLIC = {"shapes": "public"}


def _failed_baselines(r) -> dict:
    """The libraries a result skipped because timing them failed (a library whose report of its
    batch never came, say): each would leave its speedup against fewer libraries."""
    return {(s["shape_id"], name): why for s in r["shapes"] for name, why in s["baselines_skipped"].items()
            if why.startswith("raised")}


def test_honest_triton_is_accepted_with_gpu_timing(judged):
    r = judged("honest_triton", **PUBLIC)
    assert r["verdict"] == "accepted", r["details"]
    assert r["timing"] == "judge-clock" and "NVIDIA" in r["device"]["name"] and r["device"]["driver"]
    assert r["ceilings"]["copy_gbps"] > 100 and r["ceilings"]["matmul_tflops"] > 10
    assert 100 < r["ceilings"]["canary_gbps"] <= r["ceilings"]["copy_gbps"] * 1.05  # the contention probe's idle rate
    assert "gpu_contended" not in r["flags"] and not r["shapes"][0]["baselines_contended"]  # nothing else on this GPU
    for check in ("below_roofline", "stale_output", "work_outside_window", "hook_active", "protocol_violation"):
        assert r["checks"][check] == "pass", check
    s = r["shapes"][0]
    assert s["correct"] and s["time_ms"]["n"] >= 3 and s["time_ms"]["p10"] <= s["time_ms"]["median"]
    assert s["time_ms"]["voided"] == 0 and not s.get("voided_batches")  # no witness saw another context
    assert 0.05 < s["sol_fraction"] <= 1.0
    assert "torch_F.rms_norm" in s["baselines_ms"] and s["speedup_vs_best"] > 0
    # the protocol's own cost a batch, measured through the library process and taken off
    cost, per_batch = s["time_ms"]["protocol_ms"], s["time_ms"]["calls_per_batch"]
    assert 0 < cost < 2.0 and "protocol_cost_unmeasured" not in r["flags"]
    assert s["wall_ms"] == pytest.approx(s["time_ms"]["median"] + cost / per_batch, rel=0.05)
    # the inputs' copy-in a call: the yardstick, the batches after it within its slack, the host's part
    copy_in = s["time_ms"]["copy_in_us"]
    assert set(copy_in) == {"first", "median", "max", "host_median"} and 0 < copy_in["host_median"]
    assert 0 < copy_in["median"] <= copy_in["max"] <= copy_in["first"] * 1.5 + 50  # no batch void: each within its slack
    # what the device ran for it, as the watch's profile recorded it: its own Triton kernel
    assert any(k.startswith("_rmsnorm") for k in s["device_kernels"]), s["device_kernels"]
    assert "device_unwatched" not in r["flags"]
    assert not _failed_baselines(r)



def test_a_library_and_the_same_call_as_a_kernel_are_timed_alike(kernels, tmp_path):
    """The library in the judge's library process and the very same call submitted as a kernel
    (rejected as a passthrough, but still timed): one protocol, one clock, so one time."""
    from ablate.evaluate import evaluate

    r = evaluate("rmsnorm", kernels / "passthrough.py", shapes="public", draws=1, seed=3)
    s = r["shapes"][0]
    assert "library_passthrough" in r["reasons"] and s["time_ms"], r["details"]
    lib = s["baselines_ms"]["torch_F.rms_norm"]
    assert s["time_ms"]["median"] == pytest.approx(lib, rel=0.03), (s["time_ms"], s["baselines_ms"])


def test_a_slow_host_launch_is_not_the_kernels_time(judged):
    """Half a millisecond of host work before each launch: the calls are queued behind the gate
    before it opens, so the judged time is the device's."""
    r = judged("slow_launch", **PUBLIC)
    assert r["verdict"] == "accepted", r["details"]
    same_math = judged("honest_torch", **PUBLIC)  # the same device work, launched at once
    slow, fast = r["shapes"][0]["time_ms"]["median"], same_math["shapes"][0]["time_ms"]["median"]
    assert slow < 1.1 * fast, (slow, fast)  # with the host's 0.5 ms a call it would be far above


def test_the_fused_batchs_call_by_call_twin_is_accepted_on_a_gpu(kernels, tmp_path):
    """What `benchmarks/judge_clock.py fusion` compares the fused batch with must itself pass:
    each call's own table kept until the device has read it (a freed pinned table was handed to
    the next call first, and the twin was rejected, stale_output: benchmarks/results/h100-setup-cost)."""
    from ablate.evaluate import evaluate

    twin = tmp_path / "kernel.py"
    twin.write_text((kernels / "fused_batch.py").read_text().replace("\nFUSE = True\n", "\nFUSE = False\n"))
    r = evaluate("rmsnorm", twin, shapes="smoke", seed=7)
    assert r["verdict"] == "accepted", r["details"]


def test_honest_cuda_kernel_through_cupy_is_accepted(judged):
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("cupy is not installed")
    r = judged("honest_cupy", **PUBLIC)
    assert r["verdict"] == "accepted", r["details"]


@pytest.mark.parametrize("name", ["thread_pool", "column_major", "persistent_buffer", "custom_op", "compiled", "lookahead",
                                  "cuda_graph"])  # its own Triton kernel replayed from a graph it captured
def test_honest_kernels_of_the_kinds_agents_write_are_accepted_on_a_gpu(judged, name):
    r = judged(name, draws=1, **PUBLIC)
    assert r["verdict"] == "accepted", r["details"]


@pytest.mark.slow
def test_hidden_shapes_are_judged(judged):
    r = judged("honest_triton", shapes="eval")
    assert r["verdict"] == "accepted", r["details"]
    assert len(r["shapes"]) == 4 and all(s["time_ms"] for s in r["shapes"])
    assert r["geomean_speedup"] > 0


@pytest.mark.parametrize("name,reasons,scan", [
    # work the judge's clock must not miss: left on a side stream past the batch's end, or started early
    ("side_stream", {"work_outside_window", "stale_output", "incorrect"}, True),
    ("side_stream_early", {"work_outside_window", "stale_output", "incorrect"}, True),
    ("l2_persist", {"forbidden_code"}, True),  # ctypes: refused
    ("graph_replay", {"incorrect", "stale_output"}, True),
    ("patched_timer", {"timer_tampered"}, True),
    ("output_cache", {"incorrect", "stale_output"}, True),
    # its host read of the input waits for the gate, so its calls are never queued before it opens
    ("fingerprint_cache", {"stale_output", "incorrect", "work_outside_window"}, True),
    ("timed_loop_skip", {"forbidden_code"}, False),
    ("thread_injection", {"incorrect"}, True),  # its thread fills the output after the judge read it
    ("illegal_access", {"crash"}, True),
    ("late_work", {"stale_output"}, True),
    # its calls' work left to the call it expects to end the batch: batch lengths are drawn per batch
    ("deferred", {"stale_output"}, True),
    ("seal_hook_mode", {"hook_active", "incorrect"}, False),  # the 1.65x H200 attack on the old seal
    ("seal_hook_library", {"incorrect"}, False),  # the same through a torch.library clone over aten's
    # the hostile candidate on a GPU, each with the static scan off (the run-time defence alone)
    ("frame_reader", {"forbidden_code"}, False),
    ("gc_channel_wrap", {"forbidden_code"}, False),
    ("snapshot_blind", {"forbidden_code", "timer_tampered"}, False),
    ("code_swap", {"forbidden_code"}, False),
    ("socket_forgery", {"protocol_violation"}, False),
    ("posix_spawn_helper", {"helper_process"}, False),
    ("passthrough_aten", {"library_passthrough"}, False),
    ("passthrough_timed_only", {"library_passthrough"}, False),
    ("passthrough_thread", {"library_passthrough"}, False),
    ("watch_stopped", {"library_passthrough", "driver_tampered"}, False),
    ("watch_blinded", {"library_passthrough", "driver_tampered"}, False),
    ("passthrough_redispatch", {"library_passthrough"}, False),
    ("passthrough_kernel_function", {"library_passthrough"}, False),
    ("passthrough_dispatch_key", {"library_passthrough"}, False),
    ("passthrough_mirror", {"library_passthrough"}, True),
    ("passthrough_redispatch_compiled", {"library_passthrough", "forbidden_code"}, False),
    # torch's RMSNorm captured in a CUDA graph at import, where no watch runs, and replayed: no
    # operator dispatched in a call, but the device runs the library's own kernel
    ("passthrough_graph_import", {"library_passthrough"}, False),
    # the same replay in the first calls of each timed batch only, where CUPTI loses a session's
    # first records (one more each session): the watch's padding takes that loss
    ("passthrough_head", {"library_passthrough"}, False),
    # Liger's kernel (outside ATen, a name of its own) imported by a computed name: the guard refuses it
    ("passthrough_computed_import", {"library_passthrough"}, False),
])
def test_gpu_exploit_is_rejected_for_its_reason(judged, name, reasons, scan):
    r = judged(name, draws=1, scan=scan, **PUBLIC)
    assert r["verdict"] == "rejected"
    if len(reasons) > 1 and name in ("graph_replay", "output_cache", "side_stream", "side_stream_early",
                                     "fingerprint_cache", "passthrough_redispatch_compiled"):
        assert reasons & set(r["reasons"]), r["details"]
    else:
        assert reasons <= set(r["reasons"]), r["details"]
    if any((s.get("time_ms") or {}).get("median", 1.0) < 0.98 * (s.get("floor_ms") or 0) for s in r["shapes"]):
        assert "below_roofline" in r["reasons"]  # a time faster than physics is never let through


def test_a_kernel_library_imported_by_a_computed_name_is_not_there(judged):
    """Liger's RMSNorm through importlib (no audit event, no name the scan reads): its kernel runs
    outside ATen under a name of its own, so only the sandbox, which does not show it, stops it."""
    if importlib.util.find_spec("liger_kernel") is None:
        pytest.skip("Liger is not installed here: nothing to hide")
    r = judged("passthrough_importlib", draws=1, scan=False, **PUBLIC)
    assert r["verdict"] == "rejected" and "liger_kernel" in str(r["details"]), r["details"]


@pytest.mark.parametrize("op,name,scan", [
    ("gemm", "passthrough_conv", False), ("gemm", "passthrough_inplace", False),
    ("softmax", "passthrough_masked_softmax", False), ("rmsnorm", "passthrough_batch_norm", False),
    ("gemm", "passthrough_cupy", True),  # cuBLAS through CuPy: no ATen operator, the scan names it
    ("gemm", "passthrough_graph_import_gemm", False),  # cuBLAS replayed from a graph captured at import
    # kernels the libraries never ran on these shapes, replayed the same way: their vendor's all the same
    ("gemm", "passthrough_graph_import_gemm_fp32", False), ("rmsnorm", "passthrough_graph_import_batch_norm", False),
])
def test_a_mirrored_library_kernel_is_a_passthrough_on_a_gpu(kernels, op, name, scan, monkeypatch):
    """On a GPU the mirrors reach cuDNN's convolution and batch norm, cuBLAS's in-place GEMM."""
    from ablate import operators
    from ablate.evaluate import evaluate

    # every library but max-autotune's, which tunes dozens of kernels a shape: on a cold cache the
    # first GEMM mirror took 276 s on an H100, the next (warm) 34 s; the honest kernels' tests time it
    monkeypatch.setenv("ABLATE_EVAL_BASELINES",
                       ",".join(n for n in operators.get(op).baselines if "max_autotune" not in n))
    r = evaluate(op, kernels / f"{name}.py", shapes="smoke", seed=7, draws=1, scan=scan)
    assert r["verdict"] == "rejected" and "library_passthrough" in r["reasons"], r["details"]
    assert not _failed_baselines(r)  # every library timed, compiled ones included, under the device record


def test_every_accepted_time_is_within_speed_of_light(judged):
    """sol_fraction <= 1 for the kernel and, through the floor, for every library it beat."""
    import torch

    from ablate import operators

    r = judged("honest_triton", shapes="eval")
    assert r["verdict"] == "accepted", r["details"]
    op = operators.get("rmsnorm")
    for s in r["shapes"]:
        assert 0 < s["sol_fraction"] <= 1.0 and s["floor_ms"] > 0
        # the reads count in full (each call's inputs are fresh, written long before); of the writes,
        # what L2 cannot hold (M=4000,N=7168 writes 57 MB, less than the H200's 60 MB L2)
        shape = s["shape"]
        writes = shape["M"] * shape["N"] * getattr(torch, shape["dtype"]).itemsize
        moved = op.bytes(shape) - writes + max(0, writes - r["device"]["l2_bytes"])
        assert s["floor_ms"] == pytest.approx(max(moved / r["ceilings"]["copy_gbps"] / 1e6,
                                                  op.flops(shape) / r["ceilings"]["matmul_tflops"] / 1e9)), shape
        assert all(ms >= s["floor_ms"] * 0.98 for ms in s["baselines_ms"].values()), s["baselines_ms"]
        assert s["margin"] is not None and s["margin"] <= 1 and s["envelope"]["members"]  # calibrated on the libraries


@pytest.mark.slow
def test_ceilings_and_baselines_are_cached(tmp_path, monkeypatch, kernels):
    import json

    from ablate.evaluate import evaluate

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    first = evaluate("rmsnorm", kernels / "honest_torch.py", shapes="public", draws=1)
    ceilings = json.loads((tmp_path / "ceilings.json").read_text())
    baselines = json.loads((tmp_path / "baselines.json").read_text())
    assert list(ceilings.values()) == [first["ceilings"]]
    assert any("M=16384,N=4096" in k for k in baselines)
    second = evaluate("rmsnorm", kernels / "honest_torch.py", shapes="public", draws=1)
    assert second["shapes"][0]["baselines_ms"] == first["shapes"][0]["baselines_ms"]  # read back, not re-measured
    assert any("M=16384,N=4096" in k for k in json.loads((tmp_path / "protocol.json").read_text()))
    assert second["shapes"][0]["time_ms"]["protocol_ms"] == first["shapes"][0]["time_ms"]["protocol_ms"] > 0


def test_two_evaluations_on_one_gpu_take_turns(kernels):
    """Two evaluations started together on one GPU (two threads: two judges) do not time at once:
    the second waits for the GPU's lock and says so."""
    import threading

    from ablate.evaluate import evaluate

    notes: dict[int, list[str]] = {0: [], 1: []}
    results: dict[int, dict] = {}

    def one(i):
        results[i] = evaluate("rmsnorm", kernels / "honest_triton.py", shapes="public", draws=1,
                              progress=notes[i].append)

    threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert all(results[i]["verdict"] == "accepted" and "no_device_lock" not in results[i]["flags"] for i in (0, 1))
    waited = [i for i in (0, 1) if any("waiting for the GPU" in n for n in notes[i])]
    assert len(waited) == 1, notes


def test_another_process_using_the_gpu_is_seen_by_the_canary():
    """A matmul loop in another process, time-sliced with this one: the canary copy says so; once
    it ends, the canary does not."""
    import subprocess
    import sys
    import time

    from ablate.evaluate import _gpu

    ceilings = {"canary_gbps": max(_gpu.canary_gbps() for _ in range(3))}
    assert _gpu.contention(ceilings) is None
    hog = subprocess.Popen([sys.executable, "-c", (
        "import time, torch\n"
        "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
        "a @ a; torch.cuda.synchronize(); print('busy', flush=True)\n"
        "end = time.time() + 60\n"
        "while time.time() < end:\n"
        "    a @ a\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "busy"
        time.sleep(0.5)
        why = _gpu.contention(ceilings)
        assert why and "another process is using the GPU" in why, (why, ceilings)
    finally:
        hog.kill()
        hog.wait()
    time.sleep(0.5)
    assert _gpu.contention(ceilings) is None
