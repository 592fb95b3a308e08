"""The correctness checks reject what they must and accept what is correct."""
import torch

import operators
from operators._checks import allclose, scaled_allclose, topk_check


def test_allclose_rejects_shape_dtype_count_and_values():
    e = torch.ones(4, 4, dtype=torch.bfloat16)
    assert allclose(e.clone(), e, 1e-2, 1e-2)[0]
    assert "shape" in allclose(torch.ones(4, 5, dtype=torch.bfloat16), e, 1e-2, 1e-2)[2]
    assert "dtype" in allclose(e.float(), e, 1e-2, 1e-2)[2]
    assert "output(s)" in allclose((e, e), e, 1e-2, 1e-2)[2]
    bad = e.clone()
    bad[2, 3] = 1.5
    ok, err, msg = allclose(bad, e, 1e-2, 1e-2)
    assert not ok and err == 0.5 and "1 of 16" in msg


def test_allclose_nan_only_where_expected():
    e = torch.tensor([1.0, float("nan")])
    assert allclose(torch.tensor([1.0, float("nan")]), e, 0, 0)[0]
    assert not allclose(torch.tensor([1.0, 2.0]), e, 0, 0)[0]
    assert not allclose(torch.tensor([float("nan"), float("nan")]), e, 0, 0)[0]


def test_softmax_tolerance_rejects_an_all_zero_output():
    op = operators.get("softmax")
    shape = {"M": 4, "N": 3000, "dtype": "bfloat16"}
    inputs = op.make_inputs(shape, 0, "cpu", "normal")
    expected = op.reference(*inputs)
    assert op.verify(expected.clone(), expected, inputs, "bfloat16")[0]
    assert not op.verify(torch.zeros_like(expected), expected, inputs, "bfloat16")[0]


def test_cross_entropy_rejects_a_bf16_accumulated_loss():
    op = operators.get("cross_entropy")
    inputs = op.make_inputs({"M": 64, "V": 3000, "dtype": "bfloat16"}, 0, "cpu", "normal")
    expected = op.reference(*inputs)
    lowered = expected.to(torch.bfloat16).float()  # the loss rounded to bf16 once
    assert op.verify(expected.clone(), expected, inputs, "bfloat16")[0]
    assert float(lowered) != float(expected)
    assert not op.verify(lowered, expected, inputs, "bfloat16")[0]


def test_scaled_allclose_follows_operand_scale():
    op = operators.get("gemm")
    shape = {"M": 32, "N": 24, "K": 512, "dtype": "bfloat16"}
    for dist in operators.DISTRIBUTIONS:
        a, b = op.make_inputs(shape, 0, "cpu", dist)
        expected = op.reference(a, b)
        # another correct order of float32 accumulation passes on every scale ...
        other = (a.float().flip(1) @ b.float().flip(1).T).to(torch.bfloat16)
        assert op.verify(other, expected, (a, b))[0], dist
        # ... an fp8-precision product does not, where outputs cross zero (on 'offset' data
        # every output is near 9K and fp8's error hides inside bf16's relative tolerance)
        coarse = (a.to(torch.float8_e4m3fn).float() @ b.to(torch.float8_e4m3fn).float().T).to(torch.bfloat16)
        assert op.verify(coarse, expected, (a, b))[0] == (dist == "offset"), dist


def test_scaled_allclose_unknown_dtype():
    check = scaled_allclose({"bfloat16": (1e-2, 1e-2)})
    ok, _, msg = check(torch.ones(2), torch.ones(2), ())
    assert not ok and "float32" in msg


def _topk_case():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0], [5.0, 4.0, 4.0, 2.0, 1.0]], dtype=torch.bfloat16)
    return x, 2, torch.topk(x, 2)


def test_topk_accepts_any_tied_index():
    x, k, (values, _) = _topk_case()
    for idx in ([[1, 2], [0, 1]], [[4, 1], [0, 2]], [[2, 4], [0, 1]]):
        ok, _, msg = topk_check((values, torch.tensor(idx)), (values, None), (x, k))
        assert ok, msg


def test_topk_rejects_wrong_answers():
    x, k, (values, indices) = _topk_case()
    cases = {
        "repeats": (values, torch.tensor([[1, 1], [0, 1]])),
        "differs from the returned values": (values, torch.tensor([[1, 3], [0, 1]])),
        "outside": (values, torch.tensor([[1, 9], [0, 1]])),
        "descending": (values.flip(1), indices.flip(1)),
        "dtypes": (values, indices.int()),
        "shapes": (values[:, :1], indices[:, :1]),
        "tuple": (values,),
    }
    for why, out in cases.items():
        ok, _, msg = topk_check(out, (values, indices), (x, k))
        assert not ok and why in msg, (why, msg)


def test_topk_operator_uses_its_check_on_ties():
    op = operators.get("topk")
    x, k = op.make_inputs({"M": 6, "N": 3000, "k": 40, "dtype": "bfloat16"}, 0, "cpu", "uniform")
    values, indices = op.reference(x, k)
    # bf16 uniform values tie often; a stable sort picks other tied columns than topk does
    sv, si = torch.sort(x, dim=-1, descending=True, stable=True)
    assert not torch.equal(si[:, :k], indices)
    assert op.verify((sv[:, :k].contiguous(), si[:, :k].contiguous()), (values, indices), (x, k))[0]
