"""benchmarks/fused_stats.py under Triton's CPU interpreter (a process of its own: TRITON_INTERPRET
must precede importing triton): the rule's error pass as two kernels gives the eager pass's counts
and maxima exactly and its float64 sums to the last bits, on outputs with NaN and Inf where the
reference has them and where it does not, with and without rows, in both wide dtypes; and
check_cost --fused times it beside the eager pass."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

COMPARE = r'''
import json
import torch
from ablate.operators import _error_stats as es
from benchmarks import fused_stats as fs

out = []
for wide in (torch.float32, torch.float64):
    for row, tol in ((0, 5e-4), (1000, 5e-4), (37, 1e-3), (1000, 0.05)):
        g = torch.Generator().manual_seed(row + 1)
        n = 13 * (row or 1000)
        r = torch.randn(n, generator=g, dtype=torch.float64).to(wide)
        r[::7] *= 1e-3  # small elements beside large ones: the rows' sizes differ
        o = (r.double() * (1 + 1e-3 * torch.randn(n, generator=g, dtype=torch.float64))).to(wide)
        o[40:60] = 0  # a stale stretch: far beyond the tolerance
        o[5], o[17] = float("nan"), float("inf")  # non-finite where the reference is finite
        r[23], o[23] = float("inf"), float("inf")  # matched
        r[29], o[29] = float("nan"), 1.0  # not matched
        r[31], o[31] = float("-inf"), float("inf")  # not matched
        r[37], o[37] = float("nan"), float("nan")  # matched
        scale = torch.tensor(es._scale(r, wide, 1 << 22), dtype=torch.float64)
        t = torch.tensor(tol, dtype=torch.float64)
        out.append({"case": f"{wide} row={row} tol={tol}", "eager": es.chunk_stats(o, r, scale, t, row).tolist(),
                    "fused": fs.chunk_stats(o, r, scale, t, row).tolist()})
print(json.dumps(out))
'''


def _interpreted(args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_fused_pass_gives_the_eager_pass_statistics():
    done = _interpreted(["-c", COMPARE])
    assert done.returncode == 0, done.stderr[-3000:]
    cases = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(cases) == 8
    for c in cases:
        (n_e, max_e, sq_e, emax_e, beyond_e), (n_f, max_f, sq_f, emax_f, beyond_f) = c["eager"], c["fused"]
        assert (n_f, max_f, emax_f, beyond_f) == (n_e, max_e, emax_e, beyond_e), c
        assert sq_f == pytest.approx(sq_e, rel=1e-13), c
        assert n_e == 4 and beyond_e >= 10  # the non-finite and stale elements were there to find


def test_check_cost_times_the_fused_pass_beside_the_eager_one(tmp_path):
    out = tmp_path / "check.jsonl"
    done = _interpreted(["-m", "benchmarks.check_cost", "--operators", "rmsnorm", "--fused", "--repeats", "1",
                         "--out", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()][1:]
    assert [r["pass"] for r in rows] == ["eager", "fused"] * 2
    assert all(r["ok"] and r["stats_drift"] < 1e-12 for r in rows)


def test_fused_on_a_cpu_without_the_interpreter_is_one_line(tmp_path, monkeypatch, capsys):
    from benchmarks import check_cost

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(SystemExit) as e:
        check_cost.main(["--fused", "--out", str(tmp_path / "check.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and "TRITON_INTERPRET=1" in err[-1]
    assert not (tmp_path / "check.jsonl").exists()
