"""python -m ablate.evaluate: one JSON object or a table; exit 0 for any verdict, 2 for bad arguments."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
KERNELS = Path(__file__).parent / "kernels"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ablate.evaluate", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_json_output_is_one_object_and_a_rejection_exits_zero():
    r = cli("--operator", "rmsnorm", "--submission", str(KERNELS / "raises.py"), "--shapes", "smoke", "--json",
            "--seed", "3", "--draws", "1")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)  # the whole of stdout is one JSON object
    assert result["verdict"] == "rejected" and result["reasons"] == ["exception"] and result["seed"] == 3


def test_table_reaches_the_same_verdict():
    r = cli("--operator", "rmsnorm", "--submission", str(KERNELS / "honest_torch.py"), "--shapes", "smoke",
            "--draws", "1")
    assert r.returncode == 0, r.stderr
    assert "ACCEPTED" in r.stdout and "M=5,N=1000,dtype=bfloat16" in r.stdout and "speedup" in r.stdout
    # progress on stderr, one line per shape judged
    assert "shape 1/2 M=8,N=512,dtype=bfloat16: correct" in r.stderr and "shape 2/2" in r.stderr


def test_quiet_prints_no_progress():
    r = cli("--operator", "rmsnorm", "--submission", str(KERNELS / "raises.py"), "--shapes", "smoke", "--draws", "1",
            "--quiet")
    assert r.returncode == 0 and r.stderr == "" and "REJECTED - exception" in r.stdout


def test_bad_arguments_exit_2_with_one_line():
    r = cli("--operator", "nope", "--submission", str(KERNELS / "honest_torch.py"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "valid operators:" in r.stderr and "rmsnorm" in r.stderr
    r = cli("--operator", "rmsnorm", "--submission", str(KERNELS / "honest_torch.py"), "--shapes", "huge")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "valid sets: smoke, public, eval" in r.stderr


def test_missing_file_is_a_verdict_not_an_error(tmp_path):
    r = cli("--operator", "rmsnorm", "--submission", str(tmp_path / "kernel.py"), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["reasons"] == ["missing_file"]
