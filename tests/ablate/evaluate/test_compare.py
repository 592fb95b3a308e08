"""Output rules: plain dense tensors, no aliasing, full-output tolerance, NaN never passes."""
import math

import torch

from ablate.evaluate._compare import aliases, as_list, compare, layout_problem


def test_as_list_accepts_only_plain_tensors():
    t = torch.zeros(2)
    assert as_list(t) == [t]
    assert len(as_list((t, t))) == 2
    assert as_list(t.tolist()) is None
    assert as_list(torch.nn.Parameter(t)) is None  # a subclass
    assert as_list(()) is None


def test_layout_problem():
    x = torch.zeros(4, 6)
    assert layout_problem(x) is None
    assert layout_problem(x.t()) is None  # column-major is dense
    assert layout_problem(x[:, :3]) is not None  # gaps
    assert layout_problem(x[:1].expand(4, 6)) is not None  # overlapping rows
    assert layout_problem(x.to_sparse()) is not None


def test_aliases():
    x, w = torch.zeros(4, 6), torch.zeros(6)
    assert aliases([x[1:]], (x, w))
    assert not aliases([x.clone()], (x, w))


def test_compare_tolerance_and_nan():
    ref = torch.linspace(-3, 3, 100, dtype=torch.float64)
    ok, err, msg = compare(ref.to(torch.bfloat16), ref, 1e-2, 1.6e-2)
    assert ok and err < 0.02 and msg is None
    bad = ref.clone()
    bad[17] += 1.0
    ok, err, msg = compare(bad, ref, 1e-2, 1.6e-2)
    assert not ok and abs(err - 1.0) < 1e-9 and "[17]" in msg and "1 of 100" in msg
    nan = ref.clone()
    nan[3] = float("nan")
    ok, err, msg = compare(nan, ref, 1e9, 1e9)  # no tolerance lets NaN through
    assert not ok and math.isnan(err) and "NaN" in msg
