"""The operator registry, operator sets (load_set) and external kernel files as baselines."""
import textwrap

import pytest
import torch

from ablate import operators
from ablate.errors import AblateError


def test_unknown_operator_lists_valid_names():
    with pytest.raises(AblateError) as e:
        operators.get("sofmax")
    assert "'sofmax'" in str(e.value)
    for name in operators.REGISTRY:
        assert name in str(e.value)


def test_unloaded_external_name_says_how_to_load():
    with pytest.raises(AblateError, match="load_set"):
        operators.get("kernelbench/999_Not_loaded")


def test_get_caches_the_operator():
    assert operators.get("softmax") is operators.get("softmax")


def test_load_set_names_from_registry():
    ops = operators.load_set({"names": ["softmax", "gemm"], "external_baselines": {}})
    assert [o.name for o in ops] == ["softmax", "gemm"]
    assert ops[0] is operators.get("softmax")  # no external baselines: the registered object


def test_load_set_errors():
    with pytest.raises(AblateError, match="names no operators"):
        operators.load_set({"names": []})
    with pytest.raises(AblateError, match="valid sources: registry, kernelbench, flashinfer"):
        operators.load_set({"source": "tritonbench", "names": ["x"]})
    with pytest.raises(AblateError, match="valid operators"):
        operators.load_set({"names": ["nope"]})


def _kernel_file(tmp_path, body="return (x.float() * 2).to(x.dtype)"):
    path = tmp_path / "kernel.py"
    path.write_text(textwrap.dedent(f"""
        import torch

        CALLS = []

        def kernel(x):
            CALLS.append(1)
            {body}
    """))
    return path


def test_external_baseline_from_a_file(tmp_path):
    op = operators.get("softmax")
    path = tmp_path / "later" / "kernel.py"
    ext = operators.with_external_baselines(op, {"published": str(path)})
    b = ext.baselines["published"]
    assert "not found" in b.unavailable() and b.needs_cuda
    assert set(ext.baselines) == set(op.baselines) | {"published"}
    assert "published" not in op.baselines  # the registered operator is unchanged
    # loaded lazily: the file may appear after registration
    path.parent.mkdir()
    path.write_text("import torch\n\ndef kernel(x):\n    return torch.softmax(x.float(), -1).to(x.dtype)\n")
    assert b.unavailable() is None
    shape = op.shapes["smoke"][1]
    inputs = op.make_inputs(shape, 0, "cpu", "large")
    j = op.verify(b.fn(*inputs), inputs)
    assert j.ok, j.message


def test_external_baseline_that_is_wrong_is_judged_wrong(tmp_path):
    op = operators.get("softmax")
    ext = operators.with_external_baselines(op, {"bad": _kernel_file(tmp_path)})
    inputs = op.make_inputs(op.shapes["smoke"][0], 0, "cpu", "normal")
    assert not op.verify(ext.baselines["bad"].fn(*inputs), inputs).ok


def test_external_baseline_name_clash():
    with pytest.raises(AblateError, match="liger"):
        operators.with_external_baselines(operators.get("softmax"), {"liger": "/x.py"})


def test_load_set_attaches_external_baselines_and_get_finds_them(tmp_path):
    path = _kernel_file(tmp_path)
    try:
        flat = operators.load_set({"names": ["swiglu"], "external_baselines": {"mine": str(path)}})
        assert "mine" in flat[0].baselines
        assert "mine" in operators.get("swiglu").baselines  # get() now returns the set's version
        nested = operators.load_set({"names": ["softmax", "gemm"],
                                     "external_baselines": {"softmax": {"theirs": str(path)}, "all": str(path)}})
        assert "theirs" in nested[0].baselines and "theirs" not in nested[1].baselines
        assert "all" in nested[0].baselines and "all" in nested[1].baselines
    finally:
        operators._loaded.clear()
    assert "mine" not in operators.get("swiglu").baselines


def test_kernel_of_default_entry(tmp_path):
    from ablate.operators._operator import load_module

    op = operators.get("gemm")
    mod = load_module(_kernel_file(tmp_path), "entry_test")
    assert op.kernel_of(mod) is mod.kernel
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ValueError, match="kernel"):
        op.kernel_of(load_module(empty, "entry_empty"))


def test_verify_uses_the_shape_dtype_tolerance():
    op = operators.get("cross_entropy")
    inputs = op.make_inputs(op.shapes["smoke"][0], 0, "cpu", "normal")
    expected = op.reference(*inputs)
    near = expected + 5e-4 * expected.abs()
    assert not op.verify(near, inputs).ok  # bf16 inputs: tolerance 1e-4 of the loss
    assert op.verify(expected + torch.tensor(1e-7), inputs).ok
