"""benchmarks/triton_first_compile.py without a GPU: the template compiled for sm_90 in fresh
processes, with and without the evaluator's warm-up compile, and a summary of both."""
import json

import pytest

from benchmarks import triton_first_compile


def test_each_repeat_compiles_the_template_cold_and_after_the_warm_up(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "compile.jsonl"
    assert triton_first_compile.main(["--repeats", "1", "--out", str(out)]) == 0
    head, *rows, summary = [json.loads(line) for line in out.read_text().splitlines()]
    assert "command" in head and [r["warmed"] for r in rows] == [False, True]
    assert rows[1]["warm_up_s"] > 0.01  # a compile ran before the template's (none takes 10 ms)
    assert all(r["compile_s"] > 0 for r in rows) and summary["arch"] == 90


def test_an_architecture_triton_cannot_compile_for_is_one_line(capsys):
    pytest.importorskip("triton")
    with pytest.raises(SystemExit, match="the compile failed: "):
        triton_first_compile.main(["--arch", "1", "--repeats", "1"])
