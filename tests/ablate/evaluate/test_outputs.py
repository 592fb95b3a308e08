"""Outputs cross from the candidate to the judge as raw bytes: every dtype and shape comes back
equal, and entries that do not describe the file are refused."""
import pytest
import torch

from ablate.evaluate import _outputs


def test_round_trip_keeps_values_dtypes_and_shapes(tmp_path):
    outs = [torch.randn(3, 5).bfloat16(), torch.tensor([True, False, True]), torch.arange(7, dtype=torch.int64),
            torch.tensor(2.5, dtype=torch.float64), torch.empty(0, 4), 3, 0.25,
            torch.randn(4, 6)[:, ::2]]  # a strided view arrives dense
    path = str(tmp_path / "s0_c0.out")
    entries = _outputs.write(path, outs)
    assert all(e["offset"] % 64 == 0 for e in entries if "offset" in e)
    back = _outputs.read(path, entries, "cpu")
    assert len(back) == len(outs)
    for a, b in zip(outs, back):
        if isinstance(a, torch.Tensor):
            assert b.dtype == a.dtype and b.shape == a.shape and torch.equal(a.contiguous(), b)
            assert b.is_contiguous()
        else:
            assert b == a and type(b) is type(a)


@pytest.mark.parametrize("change, message", [
    ({"offset": 1 << 20}, "does not fit"),
    ({"offset": 8}, "does not fit"),  # not 64-byte aligned
    ({"nbytes": 4}, "does not fit"),  # inconsistent with the shape
    ({"dtype": "Tensor"}, "malformed"),  # an attribute of torch, not a dtype
    ({"shape": [2, -1]}, "malformed"),
    ({"shape": "big"}, "malformed"),
])
def test_malformed_entries_are_refused(tmp_path, change, message):
    path = str(tmp_path / "s0_c0.out")
    entries = _outputs.write(path, [torch.zeros(4, 4), torch.ones(2, 2)])
    entries[1].update(change)
    with pytest.raises(ValueError, match=message):
        _outputs.read(path, entries, "cpu")


def test_a_value_must_be_a_number(tmp_path):
    path = str(tmp_path / "s0_c0.out")
    _outputs.write(path, [torch.zeros(2)])
    with pytest.raises(ValueError, match="not a number"):
        _outputs.read(path, [{"value": "__import__('os')"}], "cpu")
