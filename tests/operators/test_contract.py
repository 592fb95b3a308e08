"""Every built-in operator keeps the contract: shapes, inputs, reference, roofline, tolerance, baselines."""
import math

import pytest
import torch

from ablate import operators
from ablate.operators._correctness import RULES, calibrate
from ablate.operators._meta import nbytes
from ablate.operators._operator import load_module

NAMES = list(operators.REGISTRY)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _int_dims(shape):
    return [v for k, v in shape.items() if k != "dtype" and isinstance(v, int)]


def _outputs(out):
    return out if isinstance(out, tuple) else (out,)


def test_all_ten_operators_registered():
    assert NAMES == ["rmsnorm", "layernorm", "softmax", "cross_entropy", "swiglu", "rope", "gemm",
                     "attention", "grouped_gemm", "topk"]


@pytest.mark.parametrize("name", NAMES)
def test_shape_sets(name):
    op = operators.get(name)
    assert set(op.shapes) >= {"smoke", "public", "eval"}
    assert op.shapes["smoke"] and op.shapes["public"]
    assert any(not _pow2(d) for s in op.shapes["smoke"] for d in _int_dims(s)), "smoke needs a non-power-of-two size"
    assert all(s in op.shapes["eval"] for s in op.shapes["public"]), "eval must contain public"
    hidden = [s for s in op.shapes["eval"] if s not in op.shapes["public"]]
    assert hidden, "eval needs hidden shapes"
    assert any(not _pow2(d) for s in hidden for d in _int_dims(s)), "hidden shapes need a non-power-of-two size"
    for s in op.shapes["smoke"] + op.shapes["eval"]:
        assert s["dtype"] in op.tolerance
    # smoke stays small enough for the Triton CPU interpreter
    assert all(math.prod(_int_dims(s)) <= 1 << 20 for s in op.shapes["smoke"])


@pytest.mark.parametrize("name", NAMES)
def test_tolerance_per_dtype(name):
    op = operators.get(name)
    for dtype in ("bfloat16", "float16", "float32"):
        tol = op.tolerance[dtype]
        assert isinstance(tol, float) and 0 <= tol <= 2**-7  # at most two bf16 roundings
    assert op.rule in RULES


@pytest.mark.parametrize("name", NAMES)
def test_inputs_deterministic_per_seed_and_reference_runs(name):
    op = operators.get(name)
    for shape in op.shapes["smoke"]:
        seen = []
        for dist in operators.DISTRIBUTIONS:
            a = op.make_inputs(shape, 7, "cpu", dist)
            b = op.make_inputs(shape, 7, "cpu", dist)
            c = op.make_inputs(shape, 8, "cpu", dist)
            floats = [i for i, t in enumerate(a) if isinstance(t, torch.Tensor) and t.is_floating_point()]
            for x, y in zip(a, b):
                assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
            assert any(not torch.equal(a[i], c[i]) for i in floats), "another seed must give other inputs"
            seen.append(a[floats[0]])
            for out in _outputs(op.reference(*a)):
                assert torch.isfinite(out.float()).all()
        # the distributions differ from one another
        assert len({float(t.float().mean()) for t in seen}) == len(seen)


@pytest.mark.parametrize("name", NAMES)
def test_bytes_are_inputs_read_once_and_outputs_written_once(name):
    op = operators.get(name)
    for shape in op.shapes["smoke"]:
        inputs = op.make_inputs(shape, 0, "cpu", "normal")
        out = op.reference(*inputs)
        assert op.bytes(shape) == nbytes(list(inputs)) + nbytes(list(_outputs(out)))
        assert op.flops(shape) >= sum(o.numel() for o in _outputs(out)) > 0
    for shape in op.shapes["eval"]:
        assert op.bytes(shape) > 0 and op.flops(shape) > 0
        assert isinstance(op.bytes(shape), int) and isinstance(op.flops(shape), int)


@pytest.mark.parametrize("name", NAMES)
def test_cpu_baselines_match_reference(name):
    op = operators.get(name)
    ran = 0
    for bname, b in op.baselines.items():
        reason = b.unavailable()
        assert reason is None or (isinstance(reason, str) and reason), f"{bname}: a reason must be a string"
        if reason or b.needs_cuda:
            continue
        for shape in op.shapes["smoke"]:
            for seed, dist in enumerate(operators.DISTRIBUTIONS):
                inputs = op.make_inputs(shape, seed, "cpu", dist)
                j = op.verify(b.fn(*inputs), inputs)
                assert j.ok, f"{bname} {shape} {dist}: {j.message}"
                ran += 1
    assert ran, "at least one baseline runs on the CPU"
    assert "torch_eager" in op.baselines
    assert any(b.needs_cuda for b in op.baselines.values()), "GPU library baselines are registered"


@pytest.mark.parametrize("name", NAMES)
def test_agent_facing_fields(name):
    op = operators.get(name)
    assert op.name == name and len(op.goal) > 100 and op.why_shapes
    assert op.library_calls and all(isinstance(c, str) and c for c in op.library_calls)
    assert "reference.py" in op.task_files and op.task_files["reference.py"].is_file()
    assert "reference.py" in op.goal


@pytest.mark.parametrize("name", NAMES)
def test_reference_file_is_self_contained(name):
    """The file the agent sees runs alone: its example_inputs feed its reference."""
    op = operators.get(name)
    ref = load_module(op.task_files["reference.py"], f"standalone_{name}")
    src = op.task_files["reference.py"].read_text()
    assert "from ablate import operators" not in src and "from operators" not in src
    shape = op.shapes["smoke"][0]
    inputs = ref.example_inputs(**{k: v for k, v in shape.items() if k != "dtype"}, device="cpu")
    ours = op.make_inputs(shape, 0, "cpu", "normal")
    assert [tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)] == \
        [tuple(t.shape) for t in ours if isinstance(t, torch.Tensor)]
    j = op.verify(ref.reference(*inputs), inputs)
    assert j.ok, j.message


def test_multi_output_goals_say_what_is_returned():
    assert "tuple (q_rotated, k_rotated)" in operators.get("rope").goal
    assert "tuple (values [M, k] bfloat16, indices [M, k] int64)" in operators.get("topk").goal
    assert "0-dimensional float32" in operators.get("cross_entropy").goal


def test_grouped_gemm_groups_are_uneven_and_drawn_from_the_seed():
    op = operators.get("grouped_gemm")
    shape = {"T": 4096, "E": 64, "N": 8, "K": 8, "dtype": "bfloat16"}
    offs1 = op.make_inputs(shape, 1, "cpu", "normal")[2]
    offs2 = op.make_inputs(shape, 2, "cpu", "normal")[2]
    assert offs1.dtype == torch.int32 and int(offs1[-1]) == 4096
    sizes = torch.diff(offs1, prepend=offs1.new_zeros(1))
    assert (sizes >= 0).all() and sizes.max() > 3 * sizes.float().mean()  # skewed, not uniform
    assert not torch.equal(offs1, offs2)


def test_cross_entropy_labels_in_range():
    op = operators.get("cross_entropy")
    logits, labels = op.make_inputs({"M": 500, "V": 37, "dtype": "bfloat16"}, 3, "cpu", "normal")
    assert labels.dtype == torch.int64 and 0 <= int(labels.min()) and int(labels.max()) < 37
    assert len(labels.unique()) > 20  # drawn, not constant


def test_rope_angles_are_real_positions():
    q, k, cos, sin = operators.get("rope").make_inputs({"B": 1, "S": 6, "Hq": 2, "Hk": 1, "D": 8, "dtype": "bfloat16"},
                                                       0, "cpu", "large")
    assert torch.allclose(cos.float() ** 2 + sin.float() ** 2, torch.ones(6, 8), atol=2e-2)
    assert torch.equal(cos[0], torch.ones(8, dtype=cos.dtype))  # position 0 does not rotate
    assert torch.equal(cos[:, :4], cos[:, 4:])  # the two halves are equal (Llama's cache)


@pytest.mark.parametrize("name", NAMES)
def test_reference_in_float64_and_its_own_envelope(name):
    """The evaluator computes the reference on float64 copies of the inputs: it must run there,
    and the reference in the contract dtype must sit inside the envelope it sets (and keep its
    operator's contract rules: calibrate raises otherwise)."""
    op = operators.get(name)
    for shape in op.shapes["smoke"]:
        for seed, dist in enumerate(operators.DISTRIBUTIONS):
            inputs = op.make_inputs(shape, seed, "cpu", dist)
            wide = tuple(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs)
            exp64 = op.reference(*wide)
            assert all(o.dtype in (torch.float64, torch.float32, torch.int64) for o in _outputs(exp64))
            j = op.verify(op.reference(*inputs), inputs, envelope=calibrate(op, inputs).envelope)
            assert j.ok and j.margin <= 1 / 2, f"{shape} {dist}: {j.message or j.margin}"


@pytest.mark.parametrize("name", NAMES)
def test_tiny_rows_have_zero_and_tiny_rows(name):
    """Every operator's main input under tiny_rows holds all-zero rows, rows of 1e-5..1e-1 and
    N(0,1) rows, whatever the seed (the pattern starts at a random row)."""
    op = operators.get(name)
    for seed in range(3):
        x = op.make_inputs(op.shapes["smoke"][0], seed, "cpu", "tiny_rows")[0].float()
        peak = x.abs().amax(-1).flatten()
        assert (peak == 0).any() and ((peak > 0) & (peak < 0.5)).any() and (peak > 1).any()
