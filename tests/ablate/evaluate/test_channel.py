"""The processes' channel: whole messages with descriptors, bounded, authenticated when keyed;
tensors only from sealed in-memory files whose every entry fits."""
import os
import tempfile

import pytest
import torch

from ablate.evaluate import _channel
from ablate.evaluate._tensors import to_sealed


def pair():
    a, b = _channel.pair()
    return _channel.Channel(a), _channel.Channel(b)


def test_messages_keep_their_boundaries_and_carry_descriptors():
    a, b = pair()
    r, w = os.pipe()
    a.send("one", x=1)
    a.send("two", fds=[r], y=[1, 2])
    assert b.recv(1) == ({"kind": "one", "x": 1}, [])
    msg, fds = b.recv(1)
    assert msg == {"kind": "two", "y": [1, 2]} and len(fds) == 1
    os.write(w, b"z")
    assert os.read(fds[0], 1) == b"z"
    assert b.recv(0.01) is None  # nothing more: a timeout, not an error
    a.close()
    with pytest.raises(_channel.Closed):
        b.recv(1)


def test_malformed_and_oversized_messages_are_refused():
    a, b = pair()
    a.sock.send(b"not json")
    with pytest.raises(_channel.Malformed):
        b.recv(1)
    a.sock.send(b"[1, 2]")
    with pytest.raises(_channel.Malformed):
        b.recv(1)
    with pytest.raises(_channel.Malformed):
        a.send("big", data="x" * (_channel.MAX_MESSAGE + 1))


def test_a_keyed_channel_refuses_messages_written_without_the_key():
    """Code sharing the sender's process can write to its socket, but cannot sign."""
    a, b = pair()
    a.send_key = b.recv_key = os.urandom(32)
    a.send("timing", median=0.08)
    assert b.recv(1)[0] == {"kind": "timing", "median": 0.08}
    os.write(a.fileno(), b'{"kind": "timing", "median": 1e-06}')  # a forger on the same descriptor
    with pytest.raises(_channel.Malformed, match="without the sender's key"):
        b.recv(1)


def test_only_sealed_memfds_are_read():
    fd, entries = to_sealed("t", [torch.ones(4)])
    assert _channel.read_tensors(fd, entries, "cpu", 1 << 10)[0].tolist() == [1.0] * 4
    with pytest.raises(_channel.Malformed, match="more than"):
        _channel.read_tensors(fd, entries, "cpu", 8)  # larger than the contract allows
    os.close(fd)
    unsealed = os.memfd_create("u")
    os.write(unsealed, b"\0" * 64)
    with pytest.raises(_channel.Malformed, match="not sealed"):
        _channel.read_tensors(unsealed, entries, "cpu", 1 << 10)
    with tempfile.TemporaryFile() as f:  # a plain file its writer still holds open
        f.write(b"\0" * 64)
        f.flush()
        with pytest.raises(_channel.Malformed):
            _channel.read_tensors(f.fileno(), entries, "cpu", 1 << 10)
    r, w = os.pipe()
    with pytest.raises(_channel.Malformed, match="not a regular file"):
        _channel.read_tensors(r, entries, "cpu", 1 << 10)


@pytest.mark.parametrize("entry", [
    {"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 8},  # size inconsistent with the shape
    {"dtype": "float32", "shape": [64], "offset": 0, "nbytes": 256},  # beyond the file
    {"dtype": "float32", "shape": [4], "offset": 3, "nbytes": 16},  # misaligned
    {"dtype": "os.system", "shape": [4], "offset": 0, "nbytes": 16},  # not a dtype
    {"value": "rm -rf /"},  # a value that is not a number
    "not a dict",
])
def test_entries_that_do_not_fit_the_file_are_refused(entry):
    fd, _ = to_sealed("t", [torch.ones(4)])
    try:
        with pytest.raises(_channel.Malformed):
            _channel.read_tensors(fd, [entry], "cpu", 1 << 10)
    finally:
        os.close(fd)
