"""A warm starting point for CPU candidates: a sandboxed process that has imported torch, triton
(interpreter mode) and the driver, has never run submitted code nor touched CUDA, and forks one
fresh child per evaluation. The child runs the driver exactly as a freshly started interpreter
would; it saves the seconds of imports that otherwise dominate a CPU evaluation.

Protocol, JSON lines: the supervisor sends {"go", "env", "cwd", "log"}; the zygote answers
{"kind": "forked", "pid"} and, when a child ends, {"kind": "exit", "pid", "returncode"}.
It announces itself with {"kind": "hello", "pid"}. End of stdin ends it.
"""
from __future__ import annotations

import json
import os
import sys
import traceback


def _child(req: dict, proto_fd: int, prepared) -> int:
    """In the forked child: cut every line back to the zygote, then run the driver."""
    os.setsid()
    os.close(proto_fd)  # the child must not be able to speak for the zygote
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # nor read the zygote's requests
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.clear()
    os.environ.update(req["env"])
    os.environ["TRITON_INTERPRET"] = "1"
    os.chdir(req["cwd"])
    sys.path[0] = req["cwd"]  # as `python -m` run from the submission's directory
    from ablate.evaluate import _driver

    return _driver.run(req["go"], *prepared)


def main() -> int:
    from ablate.evaluate import _driver
    from ablate.evaluate._common import Lines, dumps

    prepared = _driver.prepare("cpu")
    proto = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(**msg):
        os.write(proto, (dumps(msg) + "\n").encode())

    send(kind="hello", pid=os.getpid())
    lines = Lines(0)
    while True:
        line = lines.get(0.05)
        while True:  # reap finished children
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            send(kind="exit", pid=pid, returncode=os.waitstatus_to_exitcode(status))
        if line is None:
            return 0
        if not line:
            continue
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(req, proto, prepared)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        send(kind="forked", pid=pid)


if __name__ == "__main__":
    sys.exit(main())
