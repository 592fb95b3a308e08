"""How the evaluator's processes talk: messages on a Unix SOCK_SEQPACKET socket (one message per
send, never split or merged), each a JSON object, optionally carrying file descriptors.

Tensors cross as sealed memfds: anonymous in-memory files written once and then sealed against
any further write, growth or shrinking, so the receiver reads exactly what the sender sent when it
sent it, whatever the sender does afterwards. The candidate process hands its outputs to the
judge this way and the judge its inputs to the candidate: the judge never opens a path the
candidate could write, follow or block on.

Standard library only at import (the supervisor imports it without torch)."""
from __future__ import annotations

import _hashlib
import _socket
import array
import hmac
import fcntl
import json
import json.scanner
import os
import select
import socket

MAX_MESSAGE = 1 << 20  # bytes of JSON in one message; larger is a protocol violation
MAX_FDS = 4  # descriptors in one message
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
_ALIGN = 64
# Captured C-level callables: the candidate sends and seals with these, whatever a submission
# later rebinds in the os, fcntl or socket modules.
_sendmsg, _sendall, _recvmsg = _socket.socket.sendmsg, _socket.socket.sendall, _socket.socket.recvmsg
_scan = json.scanner.c_make_scanner(json.JSONDecoder()) if json.scanner.c_make_scanner else None
_select = select.select
_CMSG_SPACE = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize) if hasattr(socket, "CMSG_SPACE") else 64
_RIGHTS = (socket.SOL_SOCKET, socket.SCM_RIGHTS)
_array, _memoryview, _len = array.array, memoryview, len
_mac = _hashlib.hmac_digest
MAC_BYTES = 32
_memfd, _pwrite, _ftruncate, _fcntl, _close = os.memfd_create, os.pwrite, os.ftruncate, fcntl.fcntl, os.close
_MFD, _ADD_SEALS = os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC, fcntl.F_ADD_SEALS


class Closed(EOFError):
    """The other end is gone (it exited, crashed, or closed its socket)."""


class Malformed(ValueError):
    """A message that is not what the protocol allows (too large, not JSON, not an object)."""


def pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def c_encoder():
    """JSON from C parts only, bound now: a submission in the same process cannot rebind them."""
    from _json import encode_basestring_ascii, make_encoder

    def default(o):
        raise TypeError(f"not JSON: {type(o).__name__}")

    enc = make_encoder(None, default, encode_basestring_ascii, None, ":", ",", False, False, True)
    join = "".join
    return lambda obj: join(enc(obj, 0))


class Channel:
    """One end of a socket pair. recv() returns (message, fds) or None on timeout.

    With a key, every message this end sends carries an HMAC of its bytes under the key, and
    every message it receives must carry one: code that shares the sender's process (a
    submission) can write to the socket's descriptor, but without the key, which it cannot
    reach, what it writes is not a message."""

    def __init__(self, sock: socket.socket, encode=None):
        self.sock = sock
        self.encode = encode or (lambda obj: json.dumps(obj, separators=(",", ":")))
        self.send_key: bytes | None = None
        self.recv_key: bytes | None = None

    @classmethod
    def from_fd(cls, fd: int, encode=None) -> "Channel":
        return cls(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=fd), encode)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, kind: str, fds=(), **data) -> None:
        payload = self.encode({"kind": kind, **data}).encode()
        if self.send_key is not None:
            payload = _mac(self.send_key, payload, "sha256") + payload
        if len(payload) > MAX_MESSAGE:
            raise Malformed(f"message {kind!r} is {len(payload)} bytes; the limit is {MAX_MESSAGE}")
        try:
            if fds:
                _sendmsg(self.sock, [payload], [(*_RIGHTS, _array("i", fds))])
            else:
                _sendall(self.sock, payload)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise Closed(str(e)) from None

    def recv(self, timeout: float | None) -> tuple[dict, list[int]] | None:
        if timeout is not None and not _select([self.sock], [], [], max(0.0, timeout))[0]:
            return None
        try:
            data, ancdata, flags, _ = _recvmsg(self.sock, MAX_MESSAGE + 1, _CMSG_SPACE)
        except (ConnectionResetError, OSError) as e:
            raise Closed(str(e)) from None
        fds = _array("i")
        for level, kind, payload in ancdata:
            if (level, kind) == _RIGHTS:
                fds.frombytes(payload[: _len(payload) - (_len(payload) % fds.itemsize)])
        fds = list(fds)
        if not data and not fds:
            raise Closed("end of messages")
        if len(data) > MAX_MESSAGE or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            close_all(fds)
            raise Malformed("message too large, or too many descriptors")
        if self.recv_key is not None:
            mac, data = data[:MAC_BYTES], data[MAC_BYTES:]
            if not hmac.compare_digest(mac, hmac.digest(self.recv_key, data, "sha256")):
                close_all(fds)
                raise Malformed(f"a message without the sender's key: {data[:60]!r}")
        try:
            text = data.decode()
            msg, end = _scan(text, 0) if _scan else (json.loads(text), _len(text))
            if end != _len(text):
                raise ValueError("trailing data")
        except (ValueError, StopIteration, UnicodeDecodeError):
            close_all(fds)
            raise Malformed(f"not JSON: {data[:80]!r}") from None
        if not isinstance(msg, dict) or not isinstance(msg.get("kind"), str):
            close_all(fds)
            raise Malformed(f"not a message: {data[:80]!r}")
        return msg, fds

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def send_with_segments(ch: Channel, kind: str, new: list, **msg) -> None:
    """Send `msg` as `kind` with the descriptors of new segments ([(id, size, fd)]) at most
    MAX_FDS a message: the earlier parts as "segments" messages, the last with `msg` itself (its
    "segments" field); every descriptor is closed after, sent or not."""
    try:
        for i in range(0, len(new), MAX_FDS):
            part = new[i:i + MAX_FDS]
            if i + MAX_FDS < len(new):
                ch.send("segments", fds=[f for _, _, f in part], segments=[[a, b] for a, b, _ in part])
        last = new[(max(len(new) - 1, 0) // MAX_FDS) * MAX_FDS:]
        ch.send(kind, fds=[f for _, _, f in last], segments=[[a, b] for a, b, _ in last], **msg)
    finally:
        close_all([f for _, _, f in new])


def close_all(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


# -- tensors through sealed memfds ------------------------------------------------------------
def write_sealed(name: str, chunks) -> int:
    """A memfd holding `chunks` (bytes-like, each at a 64-byte aligned offset), sealed. Returns
    the descriptor (the caller sends and closes it)."""
    fd = _memfd(name, _MFD)
    try:
        offset = 0
        for chunk in chunks:
            view, done = _memoryview(chunk).cast("B"), 0
            while done < _len(view):
                done += _pwrite(fd, view[done:], offset + done)
            offset += -(-_len(view) // _ALIGN) * _ALIGN
        _ftruncate(fd, max(offset, 1))
        _fcntl(fd, _ADD_SEALS, SEALS)
    except BaseException:
        _close(fd)
        raise
    return fd


def sealed_size(fd: int, limit: int) -> int:
    """The size of a memfd the peer sent, after checking it is a regular in-memory file sealed
    against writes and resizing and no larger than `limit`. Raises Malformed otherwise."""
    import stat

    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise Malformed("the descriptor is not a regular file")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        raise Malformed("the descriptor is not a sealable in-memory file") from None
    if seals & SEALS != SEALS:
        raise Malformed("the file is not sealed: its sender could still change it")
    if st.st_size > limit:
        raise Malformed(f"the file is {st.st_size} bytes, more than the {limit} expected")
    return st.st_size


def layout(items) -> tuple[list[dict], int]:
    """Entries for a list of tensors and Python numbers: dtype, shape and 64-byte aligned offset
    of each tensor, the value of each number; and the total size."""
    import torch

    entries, offset = [], 0
    for t in items:
        if not isinstance(t, torch.Tensor):
            entries.append({"value": t})
            continue
        n = t.numel() * t.element_size()
        entries.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "offset": offset,
                        "nbytes": n})
        offset += -(-n // _ALIGN) * _ALIGN
    return entries, offset


def read_tensors(fd: int, entries, device: str, limit: int, expected=None) -> list:
    """The tensors (and numbers) a peer sent as (memfd, entries), copied onto `device`.
    `expected`: [(shape, dtype name) or (None, None) for a number] the contract allows; any
    other entry is Malformed. Nothing is trusted: every entry is checked against the file."""
    import mmap

    import torch

    size = sealed_size(fd, limit)
    if not isinstance(entries, list) or len(entries) > 64:
        raise Malformed("tensor entries are not a list")
    if expected is not None and len(entries) != len(expected):
        raise Malformed(f"{len(entries)} entries, the contract has {len(expected)}")
    buf = None
    if size:
        mm = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        buf = torch.frombuffer(mm, dtype=torch.uint8)
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise Malformed(f"malformed entry {e!r:.100}")
        if "value" in e:
            if type(e["value"]) not in (int, float, bool):
                raise Malformed(f"value {e['value']!r:.100} is not a number")
            out.append(e["value"])
            continue
        dtype = getattr(torch, str(e.get("dtype")), None)
        shape, start, n = e.get("shape"), e.get("offset"), e.get("nbytes")
        if not isinstance(dtype, torch.dtype) or not isinstance(shape, list) \
                or not all(type(d) is int and d >= 0 for d in shape) or type(start) is not int or type(n) is not int:
            raise Malformed(f"malformed entry {e!r:.200}")
        if expected is not None:
            want_shape, want_dtype = expected[i]
            if want_shape is not None and (shape != list(want_shape) or str(e.get("dtype")) != want_dtype):
                raise Malformed(f"entry {i} is {e.get('dtype')} {shape}; the contract says {want_dtype} {want_shape}")
        numel = 1
        for d in shape:
            numel *= d
        if n != numel * dtype.itemsize or start < 0 or start % _ALIGN or start + n > size:
            raise Malformed(f"entry {e!r:.200} does not fit the {size}-byte file")
        if numel == 0:
            out.append(torch.empty(shape, dtype=dtype, device=device))
            continue
        out.append(buf[start:start + n].view(dtype).view(shape).to(device, copy=True))
    return out
