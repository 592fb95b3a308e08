"""benchmarks/evaluation_cost.py on the CPU: one line per evaluation with its phases, and the
machine and command first."""
import json
from pathlib import Path

from benchmarks import evaluation_cost

KERNEL = Path(__file__).resolve().parents[1] / "ablate" / "evaluate" / "kernels" / "honest_triton.py"


def test_each_evaluation_is_a_line_with_its_phases(tmp_path):
    out = tmp_path / "cost.jsonl"
    assert evaluation_cost.main(["--kernel", str(KERNEL), "--repeats", "2", "--out", str(out)]) == 0
    head, *rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "command" in head and "torch" in head
    assert [r["evaluation"] for r in rows] == [0, 1] and all(r["verdict"] == "accepted" for r in rows)
    assert all(r["phase_seconds"]["candidate"] > 0 and len(r["shapes"]) == 2 for r in rows)
    assert all(len(r["time_ms"]) == 2 and all(b["torch_eager"] > 0 for b in r["baselines_ms"]) for r in rows)


def test_cold_starts_from_empty_caches_and_shows_the_judges_progress(tmp_path, monkeypatch, capsys):
    import os

    warm = tmp_path / "warm"
    for var in ("ABLATE_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(var, str(warm / var))  # restored after the test: --cold rewrites them
    out = tmp_path / "cost.jsonl"
    assert evaluation_cost.main(["--kernel", str(KERNEL), "--repeats", "1", "--cold", "--out", str(out)]) == 0
    cache = Path(os.environ["ABLATE_CACHE_DIR"])
    assert not str(cache).startswith(str(warm)) and any(cache.rglob("*"))  # the run's envelopes, cached afresh
    assert not warm.exists()
    assert "] shape 1/2" in capsys.readouterr().err  # timestamped progress lines
