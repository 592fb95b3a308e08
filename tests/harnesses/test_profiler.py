"""The profiler: Nsight Compute metrics when ncu can read the counters, timed variants otherwise
(saying why), always as profile, diagnosis and ranked recommendations."""
import json
import os
import stat
from pathlib import Path

import pytest

from ablate import harnesses
from ablate import operators
from ablate.harnesses import Budget
from ablate.harnesses.mechanisms import profiler as prof

# ncu --import report.ncu-rep --csv --page raw: a header row, a units row, one row per kernel.
NCU_CSV = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed","sm__throughput.avg.pct_of_peak_sustained_elapsed","dram__bytes.sum.per_second","sm__warps_active.avg.pct_of_peak_sustained_active","sm__maximum_warps_per_active_cycle_pct","launch__registers_per_thread","launch__waves_per_multiprocessor","sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio"
"","","","","","","","","","","","usecond","%","%","Tbyte/second","%","%","register/thread","","%","inst","inst","inst"
"0","4242","python","host","_rmsnorm_rows","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","71.52","35.10","22.40","1.49","48.20","100","32","9.93","0","6.20","1.10","0.30"
'''


def test_ncu_csv_is_parsed_with_units():
    [k] = prof.parse_ncu_csv(NCU_CSV)
    assert k["kernel"] == "_rmsnorm_rows" and k["duration_us"] == pytest.approx(71.52)
    assert k["dram_gbs"] == pytest.approx(1490)  # Tbyte/second -> GB/s
    assert k["dram_throughput_pct"] == 35.1 and k["achieved_occupancy_pct"] == 48.2
    assert k["tensor_pipe_pct"] == 0 and k["top_stalls"][0]["reason"] == "long_scoreboard"
    diagnosis, recs = prof.diagnose_ncu([k])
    assert any("latency-bound" in d for d in diagnosis) and any("long_scoreboard" in d for d in diagnosis)
    assert recs and [r["rank"] for r in recs] == list(range(1, len(recs) + 1))
    assert "more loads in flight" in " ".join(r["action"] for r in recs)
    assert prof.parse_ncu_csv("==PROF== nothing") == []


def test_real_ncu_output_without_the_dram_metric_is_not_read_as_zero():
    """ncu's raw page from an H200 run (RMSNorm at 3.88 TB/s): its sections gave the busiest memory
    unit's throughput (80.6%), not DRAM's own; the diagnosis once read that as DRAM at 0%."""
    text = (Path(__file__).parent / "data" / "ncu-raw-h200-rmsnorm.csv").read_text()
    [k] = prof.parse_ncu_csv(text)
    assert "dram_throughput_pct" not in k and k["memory_throughput_pct"] == pytest.approx(80.5978)
    assert k["dram_gbs"] == pytest.approx(3876.865) and k["duration_us"] == 63.2  # "Tbyte/s" and "us": short units
    diagnosis, _ = prof.diagnose_ncu([k])
    assert "memory-bound near the ceiling: memory (the busiest of DRAM, L1, L2) at 81% of peak" in diagnosis
    assert not any("(0%)" in d for d in diagnosis)
    d, _ = prof.diagnose_ncu([{"kernel": "k", "duration_us": 5, "sm_throughput_pct": 10}])
    assert any("no memory throughput" in x for x in d)  # said, not a silent 0


def test_diagnoses_rank_by_expected_benefit():
    memory = {"kernel": "k", "duration_us": 300, "dram_throughput_pct": 91, "sm_throughput_pct": 20}
    d, recs = prof.diagnose_ncu([memory])
    assert "memory-bound near the ceiling" in d[1] and recs[0]["expected_benefit"] == "low"
    gemm = {"kernel": "mm", "duration_us": 900, "dram_throughput_pct": 30, "sm_throughput_pct": 85, "tensor_pipe_pct": 12}
    d, recs = prof.diagnose_ncu([gemm])
    assert "compute-bound" in d[1] and recs[0]["expected_benefit"] == "high" and "tensor-core" in recs[0]["action"]
    timed = {"kernel_ms": 0.2, "reference_ms": 0.8, "copy_gbs": 4000.0, "device": "NVIDIA H200",
             "by_shape": [{"kernel_ms": 0.2}, {"kernel_ms": 0.8}]}
    d, recs = prof.diagnose_timed(timed, {"bytes": 200_000_000, "flops": 0})
    assert "25% of this machine's measured copy rate" in d[1] and recs[0]["expected_benefit"] == "high"


def _fake_ncu(tmp_path, body):
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.fixture
def rmsnorm_ws(tmp_path):
    from ablate.sandbox import Limits, Workspace

    op = operators.get("rmsnorm")
    files = {n: p.read_bytes() for n, p in op.task_files.items()}
    files["shapes.json"] = json.dumps(op.shape_set("smoke")).encode()
    files["kernel.py"] = b"from reference import reference as _r\ndef kernel(x, w):\n    return _r(x, w)\n"
    return Workspace.create(tmp_path / "ws", files, Limits(confinement="none"))


def _profile(ws, h, gpu="NVIDIA H200"):
    harness = harnesses.build({"name": "p", "mechanisms": {"profiler": {"reps": 3}}})
    task = h.make_task(gpu=gpu, shapes=operators.get("rmsnorm").shape_set("smoke"))
    r = harness.run(h.Playback([("profile", {})]), task, ws, Budget(turns=2))
    return json.loads(h.tool_results(r)[0].content), r


def test_no_counter_permission_falls_back_to_timed_variants_and_says_why(rmsnorm_ws, h, tmp_path, monkeypatch):
    ncu = _fake_ncu(tmp_path, 'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access '
                              'NVIDIA GPU Performance Counters on the target device 0."\nexit 1\n')
    monkeypatch.setattr(prof, "find_ncu", lambda: ncu)
    report, r = _profile(rmsnorm_ws, h)
    assert report["source"] == "timed" and "ERR_NVGPUCTRPERM" in report["ncu_unavailable"]
    assert report["profile"]["kernel_ms"] > 0 and report["profile"]["reference_ms"] > 0 and report["profile"]["copy_gbs"] > 0
    assert len(report["profile"]["by_shape"]) == 2 and report["diagnosis"] and report["recommendations"]
    use = r.mechanisms["profiler"]
    assert use["sources"] == ["timed"] and "ERR_NVGPUCTRPERM" in use["ncu_unavailable"][0]
    assert r.spent["profiler"].tool_s > 0


def test_ncu_metrics_when_ncu_runs(rmsnorm_ws, h, tmp_path, monkeypatch):
    csv_file = tmp_path / "canned.csv"
    csv_file.write_text(NCU_CSV)
    ncu = _fake_ncu(tmp_path, f'''if [ "$1" = "--import" ]; then cat {csv_file}; exit 0; fi
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
echo "==PROF== Connected to process"; : > "$out.ncu-rep"; exit 0
''')
    monkeypatch.setattr(prof, "find_ncu", lambda: ncu)
    report, r = _profile(rmsnorm_ws, h)
    assert report["source"] == "ncu" and report["profile"][0]["kernel"] == "_rmsnorm_rows"
    assert report["files"] == ["profile/p1.ncu-rep", "profile/p1.csv", "profile/p1.log"]
    assert (rmsnorm_ws.path / "profile/p1.csv").read_text() == NCU_CSV  # ncu's output stays in the workspace
    assert r.mechanisms["profiler"]["reports"][0]["diagnosis"][0].startswith("1 kernel launch")


def test_without_a_gpu_or_ncu_the_reason_is_given(rmsnorm_ws, h, monkeypatch):
    report, _ = _profile(rmsnorm_ws, h, gpu=None)
    assert report["source"] == "timed" and report["ncu_unavailable"] == "no GPU: Nsight Compute needs one"
    monkeypatch.setattr(prof, "find_ncu", lambda: None)
    report, _ = _profile(rmsnorm_ws, h)
    assert "ncu not found" in report["ncu_unavailable"]


def test_bad_shape_index_and_missing_kernel(ws, h):
    harness = harnesses.build({"name": "p", "mechanisms": {"profiler": {}}})
    r = harness.run(h.Playback([("profile", {"shape": 3}), ("profile", {})]), h.make_task(), ws, Budget(turns=3))
    out = h.tool_results(r)
    assert out[0].is_error and "shape must be 0..0" in out[0].content
    assert out[1].is_error and "write kernel.py first" in out[1].content


@pytest.mark.gpu
@pytest.mark.parametrize("confinement", ["none", "bwrap"])
def test_profile_of_a_triton_kernel_on_the_gpu(tmp_path, h, confinement):
    """On a CUDA machine with ncu: unconfined (as this user) the profile is ncu's metrics when the user may
    read the counters; in the sandbox it is ncu's, or the timed fallback with the reason. Either way a
    diagnosis and ranked recommendations."""

    from ablate.harnesses.scripted import render, template
    from ablate.sandbox import Limits, Workspace

    if prof.find_ncu() is None:
        pytest.skip("ncu is not installed here")
    op = operators.get("rmsnorm")
    shapes = op.shape_set("public")
    source, configs = template("rmsnorm")
    files = {n: p.read_bytes() for n, p in op.task_files.items()} | {
        "shapes.json": json.dumps(shapes).encode(), "kernel.py": render(source, configs[1]).encode()}
    ws = Workspace.create(tmp_path / "ws", files, Limits(confinement=confinement))
    harness = harnesses.build({"name": "p", "mechanisms": {"profiler": {}}})
    import torch

    task = h.make_task(gpu=torch.cuda.get_device_name(), shapes=shapes)
    r = harness.run(h.Playback([("profile", {})]), task, ws, Budget(turns=2))
    report = json.loads(h.tool_results(r)[0].content)
    print(json.dumps(report, indent=1)[:4000])
    assert report["diagnosis"] and report["recommendations"]
    if report["source"] == "ncu":
        k = max(report["profile"], key=lambda x: x.get("duration_us", 0))
        assert k["duration_us"] > 10 and 0 < k["dram_throughput_pct"] <= 100 and "_rmsnorm_rows" in k["kernel"]
        assert (ws.path / "profile" / "p1.csv").stat().st_size > 0
    else:
        assert report["source"] == "timed" and report["ncu_unavailable"]
        if confinement == "none" and os.geteuid() == 0:
            pytest.fail(f"ncu should run as root, unconfined: {report['ncu_unavailable']}")
