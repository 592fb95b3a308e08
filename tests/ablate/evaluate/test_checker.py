"""The judge's decisions that need no process: the report reader and the timing verdicts."""
import json
from types import SimpleNamespace

from ablate.evaluate._checker import Judge, Tail

SHAPE = {"M": 16384, "N": 4096, "dtype": "bfloat16"}


def judge(device="cuda"):
    j = Judge({"draws": 3}, send=None)
    j.device = device
    j.ceilings = {"copy_gbps": 4000.0, "matmul_tflops": 700.0}
    j.op = SimpleNamespace(bytes=lambda s: 2 * 2 * s["M"] * s["N"], flops=lambda s: 4 * s["M"] * s["N"])
    return j


def timed(median, wall=None, lag=0.005):
    return {"median": median, "p10": median, "p90": median, "n": 50, "wall_ms": median if wall is None else wall,
            "lag_ms": lag}


def row():
    return {"baselines_ms": {"torch_eager": 0.9, "liger": 0.1}, "best_baseline": None, "speedup_vs_best": None,
            "sol_fraction": None, "time_ms": None, "wall_ms": None}


def test_honest_time_gets_speedup_and_sol():
    r, fails, ran = row(), {}, set()
    judge().judge_time(r, SHAPE, timed(0.08), fails, ran)
    assert fails == {}
    assert r["best_baseline"] == "liger" and abs(r["speedup_vs_best"] - 1.25) < 1e-9
    floor = 2 * 2 * 16384 * 4096 / 4000e9 * 1e3  # ms
    assert abs(r["sol_fraction"] - floor / 0.08) < 1e-9
    assert {"below_roofline", "stream_mismatch"} <= ran


def test_time_below_the_physical_floor_is_rejected():
    fails = {}
    judge().judge_time(row(), SHAPE, timed(0.001), fails, set())
    assert "below_roofline" in fails


def test_device_busy_after_the_timed_stream_is_a_stream_mismatch():
    fails = {}
    judge().judge_time(row(), SHAPE, timed(0.08, wall=0.9, lag=0.85), fails, set())
    assert list(fails) == ["stream_mismatch"]


def test_host_overhead_alone_is_not_a_stream_mismatch():
    fails = {}  # a small kernel with a slow Python wrapper: wall >> events, but no lag
    judge().judge_time(row(), {"M": 8, "N": 512}, timed(0.006, wall=0.12, lag=0.006), fails, set())
    assert fails == {}


def test_cpu_times_are_not_held_to_gpu_ceilings():
    r, fails, ran = row(), {}, set()
    judge("cpu").judge_time(r, SHAPE, timed(0.001, wall=5.0), fails, ran)
    assert fails == {} and r["sol_fraction"] is None and not ran


def test_malformed_timing_is_tampering():
    fails = {}
    judge().judge_time(row(), SHAPE, {"median": float("nan")}, fails, set())
    assert "driver_tampered" in fails


def test_tail_keeps_only_nonce_lines_and_flags_repeats(tmp_path):
    path = tmp_path / "result.jsonl"
    lines = [{"nonce": "n", "kind": "import", "reason": None}, {"nonce": "wrong", "kind": "done"},
             {"nonce": "n", "kind": "shape", "index": 0, "files": []}, {"nonce": "n", "kind": "shape", "index": 0}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n{\"nonce\": \"n\", \"kind\": \"do")
    t = Tail(str(path), "n")
    t.poll()
    assert t.imported["reason"] is None and list(t.shapes) == [0] and t.shapes[0]["files"] == []
    assert t.forged == 3 and not t.done  # wrong nonce, a repeated shape, a non-JSON line; the partial line waits
    with open(path, "a") as f:
        f.write("ne\"}\n")
    t.poll()
    assert t.done


def test_an_output_sent_twice_is_forged(tmp_path):
    path = tmp_path / "result.jsonl"
    out = {"nonce": "n", "kind": "output", "index": 0, "set": 1, "file": "f", "entries": []}
    path.write_text(json.dumps(out) + "\n" + json.dumps(dict(out, file="g")) + "\n")
    t = Tail(str(path), "n")
    t.poll()
    assert t.outputs == {(0, 1): {"file": "f", "entries": []}} and t.forged == 1


def test_outputs_checked_early_must_be_the_ones_reported(tmp_path):
    j = judge()
    j.cfg, j.mode = {"draws": 1, "outdir": str(tmp_path)}, "cuda-events"
    sent = {"file": str(tmp_path / "s0_c0.out"), "entries": [{"value": 1}]}
    report = {"files": [dict(sent, entries=[{"value": 2}])], "failures": {}}
    row, fails, _ = j.judge_shape(0, SHAPE, {"refs": {0: None}}, report, None, checked={0: (sent, ({}, 0.0))})
    assert "driver_tampered" in fails and not row["correct"]
    row, fails, _ = j.judge_shape(0, SHAPE, {"refs": {0: None}}, {"files": [sent], "failures": {}}, None,
                                  checked={0: (sent, ({}, 0.0))})
    assert fails == {} and row["correct"]  # the early result stands: nothing read twice


def test_device_out_of_memory_while_judging_is_a_verdict(tmp_path):
    import torch

    j = judge()
    j.torch, j.cfg, j.shapes = torch, {"draws": 1, "outdir": str(tmp_path)}, [SHAPE, dict(SHAPE, M=8)]

    def full(*_):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 512.00 MiB.")

    j.shape_result = full
    reasons, ran = {}, set()
    rows = j.judge_shapes(SimpleNamespace(), [None, None], reasons, ran)
    assert list(reasons) == ["oom"] and "while the judge checked" in reasons["oom"]
    assert len(rows) == 1 and rows[0]["error"].startswith("the device ran out of memory")  # stops at the first
