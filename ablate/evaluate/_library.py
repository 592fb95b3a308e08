"""A library process: the baselines timed exactly as a candidate is, by the same driver (_candidate)
in a process of the same kind (an interpreter of its own, the same environment), through the same
messages and the same clock (_shape), so a library's time and a kernel's carry the same
protocol cost and their ratio none of it. It runs trusted code only (the operator's registered
baselines), so it is not confined, and the judge keeps it across evaluations (_link).

    python -m ablate.evaluate._library FD

Protocol, after the driver's hello: the judge sends {"kind": "library", operator, node, name}
to pick the function the following calls run (answered "ready", or "error" with why); then slots,
call and release as for a candidate; "done" ends it. {"kind": "available", operator, node, names}
asks which of those libraries can run here (answered "available" {found: {name: why not, or
None}}): an optional library's check imports it, which this process does anyway to run it, and the
judge then never does (Liger's import alone took 4-5 s on an H100: benchmarks/results/h100-setup-cost).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from ablate.evaluate import _channel


PLAIN_COPY = "(plain copy)"  # the function the protocol's own cost is measured with (_baselines.protocol_ms)


def plain_copy(*inputs):
    """A copy of the first tensor input: a kernel of known, ordinary work, whatever the operator."""
    return next(t for t in inputs if hasattr(t, "clone")).clone()


class Library:
    """The judge's handle on its library process (started on first use, one per judge)."""

    def __init__(self, device: str):
        ours, theirs = _channel.pair()
        env = dict(os.environ)
        env["ABLATE_EVAL_DEVICE"] = device
        self.proc = subprocess.Popen([sys.executable, "-m", "ablate.evaluate._library", str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        theirs.close()
        self.ch = _channel.Channel(ours)
        got = self.ch.recv(120.0)
        if got is None or got[0].get("kind") != "hello":
            self.close()
            raise RuntimeError(f"the library process did not start: {self._err()}")
        self.using = None  # (operator, node, name) of the function the calls run

    def _err(self) -> str:
        try:
            if self.proc.poll() is not None and self.proc.stderr is not None:
                return self.proc.stderr.read().decode(errors="replace")[-2000:]
        except OSError:
            pass
        return "no answer"

    def use(self, operator: str, node: dict | None, name: str) -> None:
        """Let the following calls run `name` of `operator` (a library of one operator may share its
        name with another's: the operator picks it too)."""
        using = (operator, json.dumps(node, sort_keys=True), name)
        if using == self.using:
            return
        self.using = None
        self.ch.send("library", operator=operator, node=node, name=name)
        got = self.ch.recv(600.0)
        if got is None or got[0].get("kind") != "ready":
            raise RuntimeError(str((got or [{}])[0].get("message") or self._err())[:2000])
        self.using = using

    def available(self, operator: str, node: dict | None, names: list[str]) -> dict[str, str | None]:
        """{name: why the library cannot run here, or None} for those of `operator`'s libraries."""
        self.ch.send("available", operator=operator, node=node, names=list(names))
        got = self.ch.recv(600.0)
        found = (got or [{}])[0].get("found") if got and got[0].get("kind") == "available" else None
        if not isinstance(found, dict) or set(found) != set(names):
            raise RuntimeError(f"the library process did not say which libraries can run: {self._err()}"[:2000])
        return {name: None if found[name] is None else str(found[name])[:300] for name in names}

    def peer(self):
        from ablate.evaluate._shape import Peer

        def receive(kinds, limit):
            got = self.ch.recv(limit)
            if got is not None and got[0].get("kind") not in kinds:
                _channel.close_all(got[1])
                raise RuntimeError(f"the library process sent {got[0].get('kind')!r}")
            return got

        return Peer(lambda kind, fds=(), **msg: self.ch.send(kind, fds=fds, **msg), receive,
                    lambda: self.proc.poll() is None)

    def close(self) -> None:
        try:
            self.ch.send("done")
        except (_channel.Closed, OSError):
            pass
        self.ch.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(fd: int) -> int:
    from ablate.evaluate import _candidate, _judge

    torch, device, snapshot, pool, _ = _candidate.prepare(os.environ.get("ABLATE_EVAL_DEVICE", "auto"), watch=False)
    ch = _channel.Channel.from_fd(fd)
    ch.send("hello", pid=os.getpid())
    driver = _candidate.Driver({"library_ops": (), "library": True}, torch, device, snapshot, ch, [], pool)

    def use(msg: dict) -> None:
        if msg.get("kind") == "available":
            return ch.send("available", found=_available(msg))
        if msg.get("kind") != "library":
            raise SystemExit(0)
        try:
            if msg["name"] == PLAIN_COPY:
                driver.fn = plain_copy
            else:
                driver.fn = _judge.load_operator(msg["operator"], msg.get("node")).baselines[msg["name"]].fn
        except Exception as e:  # noqa: BLE001 (said to the judge, which skips this library)
            return ch.send("error", message=f"{type(e).__name__}: {e}")
        driver.signature_checked = None
        driver.ops.forget_kernels()  # each library's kernels named afresh, for its own baseline entry
        ch.send("ready")

    try:
        driver.serve(other=use)
    except _channel.Closed:
        pass
    return 0


def _available(msg: dict) -> dict[str, str | None]:
    from ablate.evaluate import _judge

    try:
        baselines = _judge.load_operator(msg["operator"], msg.get("node")).baselines
    except Exception as e:  # noqa: BLE001 (said for every name: none of them can run)
        return {name: f"operator not loaded: {type(e).__name__}: {e}"[:300] for name in msg.get("names") or ()}
    found = {}
    for name in msg.get("names") or ():
        try:
            found[name] = baselines[name].unavailable() if name in baselines else "no such library"
        except Exception as e:  # noqa: BLE001 (a check that fails: the library cannot run)
            found[name] = f"its check raised {type(e).__name__}: {e}"[:300]
    return found


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
