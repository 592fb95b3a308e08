"""benchmarks/kernelbench.py on the CPU (a small KernelBench problem written for these tests,
Triton's interpreter): the honest ModelNew is accepted with a time, the passthrough rejected,
and --kernels judges only the kinds named."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KB = Path(__file__).parent / "data" / "kernelbench" / "KernelBench"


def _run(out, *kernels):
    extra = ["--kernels", *kernels] if kernels else []
    r = subprocess.run([sys.executable, "benchmarks/kernelbench.py", "--kernelbench", str(KB), "--out", str(out),
                        "--problems", "1_Square_matrix_multiplication_", *extra], cwd=ROOT, capture_output=True,
                       text=True, timeout=280, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads((out / "results.json").read_text())["rows"]


def test_honest_is_accepted_with_a_time_and_the_passthrough_rejected(tmp_path):
    honest, passthrough = _run(tmp_path / "both")
    assert honest["kernel"] == "honest Triton ModelNew" and honest["verdict"] == "accepted", honest["details"]
    assert honest["time_ms"] > 0 and honest["best_ms"] > 0  # an accepted shape always has a time
    assert passthrough["verdict"] == "rejected" and "library_passthrough" in passthrough["reasons"]
    assert "| 1_Square_matrix_multiplication_ | honest Triton ModelNew | accepted |" in (tmp_path / "both" / "results.md").read_text()


def test_kernels_judges_only_the_kinds_named(tmp_path):
    rows = _run(tmp_path / "one", "passthrough")
    assert [r["kernel"] for r in rows] == ["passthrough ModelNew"]
