"""benchmarks/check_cost.py on the CPU: a line per operator, shape and chunk size, each part
timed, the statistics the same whatever the chunk; --fused under Triton's interpreter (a process
of its own: TRITON_INTERPRET must precede importing triton)."""
import json

import pytest

from benchmarks import check_cost


def test_each_shape_and_chunk_is_a_line_with_its_parts(tmp_path):
    out = tmp_path / "check.jsonl"
    assert check_cost.main(["--operators", "rmsnorm", "--chunks", "4194304", "1024", "--repeats", "1",
                            "--out", str(out)]) == 0
    head, *rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "command" in head and "torch" in head
    assert [(r["shape"], r["chunk"]) for r in rows] == [
        ("M=8,N=512,dtype=bfloat16", 4194304), ("M=8,N=512,dtype=bfloat16", 1024),
        ("M=5,N=1000,dtype=bfloat16", 4194304), ("M=5,N=1000,dtype=bfloat16", 1024)]
    assert all(r["ok"] and set(r["seconds"]) == {"inputs", "reference", "error_stats"} for r in rows)
    assert all(r["stats_drift"] < 1e-6 for r in rows)  # whole rows a pass either way: the same rule
    from ablate.operators import _error_stats
    assert (_error_stats.CHUNK, _error_stats.PASS) == (1 << 22, None)  # put back


@pytest.mark.parametrize("argv,says", [
    (["--operators", "rmsnorm", "nope"], "unknown operator 'nope'"),
    (["--shapes", "nope"], "no shape set 'nope'"),
    (["--chunks", "0"], "0 is not a positive count"),
])
def test_a_bad_argument_is_one_line_before_anything_is_measured(tmp_path, capsys, argv, says):
    out = tmp_path / "check.jsonl"
    with pytest.raises(SystemExit) as e:
        check_cost.main([*argv, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and says in err[-1] and "Traceback" not in "".join(err)
    assert not out.exists()  # nothing written, nothing to lose


def test_check_cost_times_the_fused_pass_beside_the_eager_one(tmp_path, interpreted):
    out = tmp_path / "check.jsonl"
    done = interpreted(["-m", "benchmarks.check_cost", "--operators", "rmsnorm", "--fused", "--repeats", "1",
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
