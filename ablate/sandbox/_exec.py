"""Run one command with a wall-clock limit, reading its output in bounded memory."""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass

GRACE_S = 3.0  # after a kill, how long to wait for the pipe to close


@dataclass
class ExecResult:
    output: str  # stdout and stderr, interleaved; head and tail kept when long
    exit_code: int
    timed_out: bool
    seconds: float
    output_bytes: int = 0  # how much the command wrote (up to the point reading stopped)
    output_capped: bool = False  # it wrote more than the cap: the pipe was closed on it
    gpu: bool = False  # a GPU was visible to the command (its seconds count as GPU-seconds)

    @property
    def gpu_seconds(self) -> float:
        return self.seconds if self.gpu else 0.0


class _Buffer:
    """Keeps the first and last ``keep`` bytes of a stream and counts the rest."""

    def __init__(self, keep: int):
        self.keep, self.head, self.tail, self.total = keep, bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            del self.tail[: max(0, len(self.tail) - self.keep)]

    def text(self, chars: int) -> str:
        """At most ``chars`` characters: all of it, or its head and tail around a marker."""
        if self.total == len(self.head) + len(self.tail):  # nothing dropped yet
            whole = (self.head + self.tail).decode(errors="replace")
            if len(whole) <= chars:
                return whole
            head, tail = whole, whole
        else:
            head, tail = self.head.decode(errors="replace"), self.tail.decode(errors="replace")
        half = max(chars // 2, 1)
        head, tail = head[:half], tail[-half:]
        cut = self.total - len(head.encode()) - len(tail.encode())
        return f"{head}\n... [{cut} bytes of output cut] ...\n{tail}"


def run_bounded(argv: list[str], *, cwd: str, env: dict[str, str], timeout_s: float,
                keep_chars: int, max_bytes: int) -> ExecResult:
    """Run ``argv`` in its own session; kill the whole group at the deadline.

    Output beyond ``max_bytes`` is not read: the pipe is closed, so a writer gets SIGPIPE
    instead of making the runner pull gigabytes through memory.
    """
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    buf = _Buffer(keep_chars * 4)  # up to 4 bytes per character in UTF-8
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    deadline, timed_out, capped, open_ = start + timeout_s, False, False, True
    try:
        while open_:
            now = time.monotonic()
            if not timed_out and now >= deadline:
                timed_out = True
                _kill(proc)
                deadline = now + GRACE_S  # a process that left the group may hold the pipe
            elif timed_out and now >= deadline:
                break
            if not sel.select(timeout=max(0.0, min(deadline - now, 0.5))):
                continue
            while True:
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    break
                if not data:
                    open_ = False
                    break
                buf.add(data)
                if buf.total > max_bytes:
                    capped, open_ = True, False
                    break
    finally:
        sel.close()
        proc.stdout.close()
    try:
        code = proc.wait(timeout=max(0.0, deadline - time.monotonic()) if not timed_out else GRACE_S)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill(proc)
        code = proc.wait()
    return ExecResult(buf.text(keep_chars), code, timed_out, time.monotonic() - start, buf.total, capped)


def _kill(proc: subprocess.Popen) -> None:
    # The group holds bwrap (whose death tears down the sandbox's pid namespace) or, when
    # unconfined, the shell and everything it started that stayed in its session.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
