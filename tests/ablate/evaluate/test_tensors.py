"""Output rules (plain dense tensors, no aliasing) and tensors through sealed memfds."""
import os

import pytest
import torch

from ablate.evaluate import _channel
from ablate.evaluate._tensors import aliases, as_list, layout_problem, to_sealed


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


def test_tensors_round_trip_through_a_sealed_memfd():
    outs = [torch.randn(3, 5).to(torch.bfloat16), torch.arange(7), 2.5, torch.empty(0, 4), torch.randn(2, 2).t()]
    fd, entries = to_sealed("t", outs)
    try:
        back = _channel.read_tensors(fd, entries, "cpu", 1 << 20)
    finally:
        os.close(fd)
    assert back[2] == 2.5 and back[3].shape == (0, 4)
    for a, b in zip([outs[0], outs[1], outs[4]], [back[0], back[1], back[4]]):
        assert torch.equal(a.contiguous(), b)
    with pytest.raises(OSError):  # sealed: not even its writer can change it now
        os.pwrite(fd, b"x", 0)
