"""benchmarks/row_templates.py: every variant it measures sets only what its template has (a
renamed or removed knob would otherwise be timed as the default, under the variant's label), at
widths that are no eval shape's, and without a GPU it refuses in one line."""
import pytest

from ablate import operators
from ablate.harnesses.scripted import template
from benchmarks import row_templates as bench
from ablate.operators._operator import load_module


@pytest.mark.parametrize("name", ["rmsnorm", "layernorm", "softmax"])
def test_every_variant_sets_knobs_its_template_has(name):
    mod = load_module(bench.TEMPLATES / f"{name}.py", f"row_templates_test_{name}")
    _, configs = template(name)
    evals = [{k: v for k, v in s.items() if k != "dtype"} for s in operators.get(name).shapes["eval"]]
    cases = [c for c in bench.CASES if c[0] == name]
    assert cases
    for _, shape, label, cfg, attrs in cases:
        assert set(cfg) == set(configs[0]), label  # a whole configuration of this template
        assert all(hasattr(mod, k) for k in attrs), (label, attrs)
        assert shape not in evals, shape


def test_without_a_gpu_it_refuses(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert bench.main(["--out", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_it_names_the_templates_it_can_measure(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--out", str(tmp_path), "--operators", "gemm"])
    assert "invalid choice: 'gemm'" in capsys.readouterr().err


def test_a_width_it_does_not_measure_is_one_line_naming_the_ones_it_does(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--out", str(tmp_path), "--operators", "rmsnorm", "--widths", "5120"])
    err = capsys.readouterr().err
    assert "no variant of rmsnorm has a row width in [5120]" in err and "8192" in err
    assert not (tmp_path / "row_templates.md").exists()
