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
    for check in ("below_roofline", "stream_mismatch", "stale_output", "l2_persistence", "thread_injection"):
        assert r["checks"][check] == "pass", check
    s = r["shapes"][0]
    assert s["correct"] and s["time_ms"]["n"] >= 20 and s["time_ms"]["p10"] <= s["time_ms"]["median"]
    assert 0.05 < s["sol_fraction"] < 2.0
    assert "torch_F.rms_norm" in s["baselines_ms"] and s["speedup_vs_best"] > 0
    assert s["wall_ms"] >= 0.5 * s["time_ms"]["p10"]  # the synced wall clock cannot beat the events


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


@pytest.mark.parametrize("name,reason", [
    ("side_stream", "stream_mismatch"),
    ("l2_persist", "l2_persistence"),
    ("graph_replay", "incorrect"),
    ("patched_timer", "timer_tampered"),
    ("output_cache", "stale_output"),
    ("timed_loop_skip", "stale_output"),
    ("thread_injection", "thread_injection"),
    ("illegal_access", "crash"),
])
def test_gpu_exploit_is_rejected_for_its_reason(judged, name, reason):
    r = judged(name, draws=1, **PUBLIC)
    assert r["verdict"] == "rejected"
    assert reason in r["reasons"], r["details"]


@pytest.mark.slow
def test_memoised_answers_are_below_the_physical_floor(judged):
    """Right answers from a memo keyed on 8 input values: about 20 us a call, whatever the shape;
    on the largest hidden shape (floor ~0.25 ms) that is far below what reading x takes."""
    r = judged("fingerprint_cache", draws=1, shapes="eval")
    assert "below_roofline" in r["reasons"], r["details"]
    assert all(s["correct"] for s in r["shapes"])


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
