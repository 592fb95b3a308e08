"""What the judge and the candidate process agree on: input sets, seeds, the GPU lock, messages.
Standard library only: the supervisor imports it without torch."""
from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import select
from contextlib import contextmanager

from operators import DISTRIBUTIONS


_nodes_loaded: set[str] = set()


def load_operator(name: str, node: dict | None):
    """operators.get(name), after loading `node` (a conf/operators node: an external problem
    format, or external baselines) the way the caller's process loaded it."""
    import operators

    if node:
        key = json.dumps(node, sort_keys=True, default=str)
        if key not in _nodes_loaded:
            operators.load_set(node)
            _nodes_loaded.add(key)
    return operators.get(name)


def input_sets(draws: int) -> list[tuple[str, int]]:
    """(distribution, draw) pairs checked for every shape."""
    return [(dist, d) for dist in DISTRIBUTIONS for d in range(draws)]


def timing_sources(draws: int) -> list[int]:
    """Indices (into input_sets) of the sets the timed loop rotates through: the first draw of
    each distribution, so there are always several different contents, whatever `draws` is."""
    return [i for i, (_, d) in enumerate(input_sets(draws)) if d == 0]


def set_seed(master: int, shape_key: str, dist: str, draw: int) -> int:
    """Seed of one input set, derived from the evaluation's master seed (fresh per evaluation)."""
    digest = hashlib.sha256(f"{master}:{shape_key}:{dist}:{draw}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


@contextmanager
def gpu_lock(path: str, exclusive: bool):
    """Timing holds the lock exclusively; other heavy work holds it shared, so nothing else
    runs on the device (or the host) while a kernel is timed."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def finite(x):
    """JSON-safe number: NaN and infinities become None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def classify(exc: BaseException) -> str:
    """Reason code of an exception raised by the kernel."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError) or "out of memory" in text.lower() or "can't allocate memory" in text:
        return "oom"
    if any(s in text for s in ("CUDA error", "illegal memory access", "device-side assert", "misaligned address")):
        return "crash"  # the CUDA context is gone; nothing after this is trustworthy
    return "exception"


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


class Lines:
    """Lines from a file descriptor, with a timeout (select on the raw fd: no hidden buffering)."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, b""

    def get(self, timeout: float | None) -> str | None:
        """The next line; "" when none arrived within `timeout`; None at end of input."""
        while b"\n" not in self.buf:
            if not select.select([self.fd], [], [], timeout)[0]:
                return ""
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()
