"""benchmarks/calibration.py on the CPU (smoke shapes, the libraries that run there): the JSON
and Markdown it writes, every library passing, and the 1%-biased reference rejected everywhere."""
import json

from benchmarks import calibration as bench


def test_cpu_run_writes_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "out"
    assert bench.main(["--out", str(out), "--device", "cpu", "--shapes", "smoke",
                       "--operators", "rmsnorm", "cross_entropy", "topk"]) == 0
    res = json.loads((out / "calibration.json").read_text())
    rows = res["rows"]
    assert len(rows) == (2 + 3 + 2) * 5  # smoke shapes x distributions
    for r in rows:
        assert r["envelope"]["bounds"] and r["reference"]
        assert all(v["status"] == "pass" for v in r["libraries"].values()), r["libraries"]
        assert r["kernels"]["bias_1pct"]["ok"] is False and r["kernels"]["bias_1pct"]["message"]
        assert r["skipped"]["torch_compile"] == "needs CUDA"
    ce = next(r for r in rows if r["operator"] == "cross_entropy")
    assert set(ce["libraries"]) == {"torch_eager", "torch_F.cross_entropy"}
    assert ce["envelope"]["members"] == ["reference", "torch_eager", "torch_F.cross_entropy"]
    md = (out / "calibration.md").read_text()
    assert "| rmsnorm | bias_1pct | kernel | 0 | 10 |" in md
    assert "| cross_entropy | torch_eager | library | 15 | 0 | 0 | 0 |" in md
    assert "python -m benchmarks.calibration" in md and "## Left out" in md
    printed = capsys.readouterr().out
    assert printed.count("\n") >= len(rows) and "bias_1pct=FAIL" in printed


def test_unknown_names_are_refused(tmp_path, capsys):
    import pytest

    for args in (["--operators", "sofmax"], ["--distributions", "gaussian"]):
        with pytest.raises(SystemExit):
            bench.main(["--out", str(tmp_path), "--device", "cpu", *args])
        assert "valid" in capsys.readouterr().err
