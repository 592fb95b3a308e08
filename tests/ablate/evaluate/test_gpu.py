"""The evaluator on a CUDA GPU: honest Triton and CUDA (CuPy) kernels accepted with real timings,
and the exploits that only exist on a GPU rejected for their reason. Skipped without CUDA."""
import importlib.util

import pytest

pytestmark = pytest.mark.gpu

PUBLIC = {"shapes": "public"}


def test_honest_triton_is_accepted_with_gpu_timing(judged):
    r = judged("honest_triton", **PUBLIC)
    assert r["verdict"] == "accepted", r["details"]
    assert r["timing"] == "cuda-events" and "NVIDIA" in r["device"]["name"] and r["device"]["driver"]
    assert r["ceilings"]["copy_gbps"] > 100 and r["ceilings"]["matmul_tflops"] > 10
    assert 100 < r["ceilings"]["canary_gbps"] <= r["ceilings"]["copy_gbps"] * 1.05  # the contention probe's idle rate
    assert "gpu_contended" not in r["flags"] and not r["shapes"][0]["baselines_contended"]  # nothing else on this GPU
    for check in ("below_roofline", "stream_mismatch", "stale_output", "l2_persistence", "thread_injection",
                  "timing_disagrees"):
        assert r["checks"][check] == "pass", check
    s = r["shapes"][0]
    assert 0 < s["trace_ms"] <= s["time_ms"]["median"] * 1.02 + 0.002  # CUPTI's span inside the events
    assert s["correct"] and s["time_ms"]["n"] >= 20 and s["time_ms"]["p10"] <= s["time_ms"]["median"]
    assert 0.05 < s["sol_fraction"] <= 1.0
    assert "torch_F.rms_norm" in s["baselines_ms"] and s["speedup_vs_best"] > 0
    assert s["wall_ms"] >= 0.5 * s["time_ms"]["p10"]  # the synced wall clock cannot beat the events


def test_a_slow_host_launch_is_not_the_kernels_time(judged):
    """Half a millisecond of host work before each launch: the events still agree with the
    device's own record (the spin covered the launch), and the wall clock keeps the host's cost."""
    r = judged("slow_launch", **PUBLIC)
    assert r["verdict"] == "accepted", r["details"]
    s = r["shapes"][0]
    assert "events_longer_than_trace" not in s.get("flags", []), s.get("trace_note")
    assert s["time_ms"]["median"] <= s["trace_ms"] * 1.1 + 0.005, (s["time_ms"], s["trace_ms"])
    assert s["wall_ms"] >= 0.5


def test_honest_cuda_kernel_through_cupy_is_accepted(judged):
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("cupy is not installed")
    r = judged("honest_cupy", **PUBLIC)
    assert r["verdict"] == "accepted", r["details"]


def test_cuda_graph_mode(judged):
    r = judged("honest_triton", cuda_graph=True, **PUBLIC)
    assert r["verdict"] == "accepted" and r["timing"] == "cuda-graph", r["details"]
    assert r["checks"]["graph_capture_failed"] == "pass"


@pytest.mark.slow
def test_hidden_shapes_are_judged(judged):
    r = judged("honest_triton", shapes="eval")
    assert r["verdict"] == "accepted", r["details"]
    assert len(r["shapes"]) == 4 and all(s["time_ms"] for s in r["shapes"])
    assert r["geomean_speedup"] > 0


@pytest.mark.parametrize("name,reasons,scan", [
    ("side_stream", {"stream_mismatch"}, True),
    ("side_stream_early", {"timing_disagrees", "incorrect", "stale_output", "stream_mismatch"}, True),
    ("l2_persist", {"forbidden_code"}, True),  # ctypes: refused, so it cannot reserve L2 at all
    ("l2_persist_cupy", {"l2_persistence"}, False),  # native calls below the guard: the L2 guard sees it
    ("graph_replay", {"incorrect", "stale_output"}, True),
    ("patched_timer", {"timer_tampered"}, True),
    ("output_cache", {"incorrect", "stale_output"}, True),
    ("fingerprint_cache", {"stale_output"}, True),
    ("timed_loop_skip", {"forbidden_code"}, False),
    ("thread_injection", {"thread_injection"}, True),
    ("illegal_access", {"crash"}, True),
    # the hostile candidate on a GPU, each with the static scan off (the run-time defence alone)
    ("frame_reader", {"forbidden_code"}, False),
    ("gc_channel_wrap", {"forbidden_code"}, False),
    ("snapshot_blind", {"forbidden_code", "timer_tampered"}, False),
    ("code_swap", {"forbidden_code"}, False),
    ("socket_forgery", {"driver_tampered"}, False),
    ("posix_spawn_helper", {"helper_process"}, False),
    ("passthrough_aten", {"library_passthrough"}, False),
    ("passthrough_timed_only", {"library_passthrough"}, False),  # seen in the traced block's operators
])
def test_gpu_exploit_is_rejected_for_its_reason(judged, name, reasons, scan):
    if name == "l2_persist_cupy" and importlib.util.find_spec("cupy") is None:
        pytest.skip("cupy is not installed")
    r = judged(name, draws=1, scan=scan, **PUBLIC)
    assert r["verdict"] == "rejected"
    if len(reasons) > 1 and name in ("graph_replay", "output_cache", "side_stream_early"):
        assert reasons & set(r["reasons"]), r["details"]
    else:
        assert reasons <= set(r["reasons"]), r["details"]
    if any((s.get("time_ms") or {}).get("median", 1.0) < 0.98 * (s.get("floor_ms") or 0) for s in r["shapes"]):
        assert "below_roofline" in r["reasons"]  # a time faster than physics is never let through


def test_every_accepted_time_is_within_speed_of_light(judged):
    """sol_fraction <= 1 for the kernel and, through the floor, for every library it beat."""
    import torch

    import operators

    r = judged("honest_triton", shapes="eval")
    assert r["verdict"] == "accepted", r["details"]
    op = operators.get("rmsnorm")
    for s in r["shapes"]:
        assert 0 < s["sol_fraction"] <= 1.0 and s["floor_ms"] > 0
        # the reads count in full (L2 is flushed after the inputs are in place); of the writes, what
        # L2 cannot hold (M=4000,N=7168 writes 57 MB, less than the H200's 60 MB L2)
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
