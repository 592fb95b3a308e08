"""The judge's line to its peers: the candidate's messages (each one checked: a message the protocol
does not allow is forged), whether the candidate is still there, and the judge's library process
and clock kernels, started on first use. Evaluation takes these from CandidateLink; it supplies
cand, cand_closed, control, end, forged and device."""
from __future__ import annotations

import select
import time

from ablate.evaluate import _channel

# device -> the judge's library process: kept for the judge's life, not started per evaluation (it
# runs the operators' registered baselines and a plain copy, never submitted code; a fresh
# interpreter cost every evaluation about 1.6 s on a CPU: benchmarks/results/evaluation-cost-cpu)
_LIBRARIES: dict = {}


def discard_library(device: str) -> None:
    """End the library process after a failure in it: its state is unknown, the next use starts one."""
    lib = _LIBRARIES.pop(device, None)
    if lib is not None:
        lib.close()


class CandidateLink:
    def next_message(self, limit: float | None = None):
        """The candidate's next message (msg, fds); None once it is gone (its socket closed, or
        the supervisor reported its end and nothing more is queued), or after `limit` seconds."""
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            socks = ([] if self.cand_closed else [self.cand.sock]) + ([self.control.sock] if self.end is None else [])
            if not socks or (self.cand_closed and limit is not None and time.monotonic() >= deadline):
                return None
            wait = 0.5 if deadline is None else max(0.0, deadline - time.monotonic())
            ready = select.select(socks, [], [], 0.0 if self.end is not None else wait)[0]
            if self.control.sock in ready:
                try:
                    got = self.control.recv(0)
                except (_channel.Closed, _channel.Malformed):
                    got = ({"kind": "end", "returncode": None}, [])
                if got and got[0].get("kind") == "end":
                    self.end = got[0]
                continue
            if not self.cand_closed and self.cand.sock in ready:
                try:
                    got = self.cand.recv(0)
                except _channel.Closed:
                    self.cand_closed = True
                    continue
                except _channel.Malformed as e:
                    self.forged.append(str(e))
                    continue
                if got is not None:
                    return got
            elif self.end is not None:
                return None
            if self.cand_closed and self.end is None and deadline is None:
                return None  # the caller decides whether to wait for the end
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def expect(self, kinds: tuple[str, ...], shape: int | None = None):
        """The next message of one of `kinds` (for `shape`); anything else is forged."""
        while (got := self.next_message()) is not None:
            msg, fds = got
            if msg.get("kind") in kinds and (shape is None or msg.get("shape") == shape):
                return msg, fds
            _channel.close_all(fds)
            self.forged.append(f"unexpected {str(msg.get('kind'))[:40]!r} message")
        return None

    def receive(self, kinds: tuple[str, ...], limit: float | None = None):
        """The candidate's next message of one of `kinds`: (msg, fds); None when it is gone, or
        when `limit` seconds pass with none. A message of another kind breaks the protocol."""
        deadline = None if limit is None else time.monotonic() + limit
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            got = self.next_message(left)
            if got is None:
                return None
            msg, fds = got
            if msg.get("kind") in kinds:
                return msg, fds
            _channel.close_all(fds)
            self.forged.append(f"unexpected {str(msg.get('kind'))[:40]!r} message")
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def candidate_alive(self) -> bool:
        if self.cand_closed or self.end is not None:
            return False
        if select.select([self.control.sock], [], [], 0)[0]:
            try:
                got = self.control.recv(0)
            except (_channel.Closed, _channel.Malformed):
                got = ({"kind": "end", "returncode": None}, [])
            if got and got[0].get("kind") == "end":
                self.end = got[0]
                return False
        return True

    def candidate_peer(self):
        from ablate.evaluate._shape import Peer

        def send(kind, fds=(), **msg):
            if self.cand_closed:
                raise _channel.Closed("the candidate is gone")
            self.cand.send(kind, fds=fds, **msg)

        return Peer(send, self.receive, self.candidate_alive)

    def clock_kernels(self):
        if getattr(self, "_kernels", None) is None:
            from ablate.evaluate._clock import Kernels

            self._kernels = Kernels()
        return self._kernels

    def library(self):
        """The judge's library process (_library): started on first use, kept across evaluations."""
        lib = _LIBRARIES.get(self.device)
        if lib is None or lib.proc.poll() is not None:
            from ablate.evaluate._library import Library

            lib = _LIBRARIES[self.device] = Library(self.device)
        return lib
