"""benchmarks/operators.py: the report it writes (run with --device cpu, which measures nothing
but exercises every path but do_bench), and its comparison with the reference measurements."""
import json

import pytest

from benchmarks import operators as bench

MD = """| op | shape | implementation | ms | ms (repeat) | SOL |
|---|---|---|---|---|---|
| softmax | 3x5000 | torch_eager | 0.2121 | 0.2122 | 30% |
| gemm | 33x17x70 | cublas | 1.5703 | 1.6025 | 101% |
| gemm | 33x17x70 | torch_compile_maxautotune | 1.5547 | 1.5906 | 102% |
| attention_causal | 1x2x64x32 | sdpa_CUDNN_ATTENTION | 1.0403 | 1.0273 | 77% |
"""


def test_reference_rows_map_names(tmp_path):
    path = tmp_path / "ref.md"
    path.write_text(MD)
    rows = bench.reference_rows(path)
    assert rows[("softmax", "3x5000", "torch_eager")] == 0.2121
    assert rows[("gemm", "33x17x70", "torch_compile_max_autotune")] == 1.5547
    assert rows[("attention", "1x2x64x32", "sdpa_cudnn")] == 1.0403
    assert bench.reference_rows(tmp_path / "missing.md") == {}
    assert bench.dims({"M": 33, "N": 17, "K": 70, "dtype": "bfloat16"}) == "33x17x70"


def test_cpu_run_writes_json_and_markdown(tmp_path):
    ref = tmp_path / "ref.md"
    ref.write_text(MD)
    out = tmp_path / "out"
    assert bench.main(["--out", str(out), "--device", "cpu", "--shapes", "smoke", "--operators", "softmax", "gemm",
                       "--reference-md", str(ref)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["environment"]["device"] == "cpu" and "torch" in res["environment"]
    rows = {(r["operator"], r["shape_id"]): r for r in res["rows"]}
    assert len(rows) == 5  # 3 softmax + 2 gemm smoke shapes
    soft = rows[("softmax", "M=3,N=5000,dtype=bfloat16")]
    assert soft["baselines"]["torch_eager"]["doc_ms"] == 0.2121
    assert soft["baselines"]["torch_eager"]["correct"] is True
    assert soft["baselines"]["torch_compile"]["status"] == "skipped"
    assert soft["baselines"]["liger"]["status"] in ("unavailable", "skipped")
    assert soft["best"] in ("torch_eager", "torch_F.softmax") and soft["best_sol"] > 0
    gemm = rows[("gemm", "M=33,N=17,K=70,dtype=bfloat16")]
    assert gemm["flops"] == 2 * 33 * 17 * 70 and gemm["floor_ms"] > 0
    assert list(gemm["baselines"]) == ["torch_eager", "cublas", "torch_compile", "torch_compile_max_autotune"]
    md = (out / "results.md").read_text()
    assert "| softmax | 3x5000 | torch_eager |" in md and "0.2121" in md
    assert "Best library per shape" in md and "python -m benchmarks.operators" in md


def test_unknown_operator_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--out", str(tmp_path), "--device", "cpu", "--operators", "softmx"])
    assert e.value.code == 2
    assert "softmx" in capsys.readouterr().err and not (tmp_path / "results.json").exists()
