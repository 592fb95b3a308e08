"""A warm starting point for CPU candidates: a confined process that has imported torch, triton
(interpreter mode) and the driver, has never run submitted code nor touched CUDA, and forks one
fresh child per evaluation. The child runs the candidate exactly as a freshly started interpreter
would; it saves the seconds of imports that otherwise dominate a CPU evaluation.

Protocol on its socket (JSON; see _channel): the supervisor sends {"kind": "fork", "env", "cwd"}
with two descriptors (the candidate's socket to the judge, its log); the zygote answers
{"kind": "forked", "pid"} and, when a child ends, {"kind": "exit", "pid", "returncode"}. It
announces itself with {"kind": "hello", "pid"}. The end of its socket ends it.
"""
from __future__ import annotations

import os
import sys
import traceback

from ablate.evaluate import _channel


def _child(req: dict, fds: list[int], control: _channel.Channel, prepared, finder, serve) -> int:
    """In the forked child: cut every line back to the zygote, then serve one evaluation."""
    os.setsid()
    control.close()  # the child must not be able to speak for the zygote
    sock, log = fds
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.environ.clear()
    os.environ.update(req["env"])
    os.environ["TRITON_INTERPRET"] = "1"
    os.chdir(req["cwd"])
    return serve(sock, prepared, finder)


def serve(fd: int, prepared, finder, serve_one) -> int:
    control = _channel.Channel.from_fd(fd)
    control.send("hello", pid=os.getpid())
    while True:
        try:
            got = control.recv(0.05)
        except _channel.Closed:
            return 0
        while True:  # reap finished children
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            control.send("exit", pid=pid, returncode=os.waitstatus_to_exitcode(status))
        if got is None:
            continue
        req, fds = got
        if req.get("kind") != "fork" or len(fds) != 2:
            _channel.close_all(fds)
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(req, fds, control, prepared, finder, serve_one)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _channel.close_all(fds)
        control.send("forked", pid=pid)
