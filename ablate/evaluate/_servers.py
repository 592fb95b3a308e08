"""The processes the supervisor manages: warm judges, candidate processes (a fresh interpreter
per evaluation, started ahead as a spare while the previous one runs, confined and run from the
kit that _kit prepares), what a candidate may leave running (compilers and build tools, nothing
else), and killing whatever it leaves behind: the whole PID namespace of its sandbox. Standard
library only.

Every evaluation leaves nothing behind:
  - its own process tree, in a sandbox of its own (_kit); a spare is fresh until used and used
    once;
  - what it prints goes through a pipe the supervisor drains, keeping only the tail in memory;
  - when it ends, the namespace's init is killed, which takes every process in the namespace
    with it (orphans, double forks, new sessions), and the supervisor checks none is left."""
from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ablate.evaluate import _channel, _kit
from ablate.evaluate._guard import BUILD_TOOLS, SYSTEM_PROGRAMS, dlopen_only, tool_name
from ablate.evaluate._kit import EvaluatorFailure

REPO = Path(__file__).resolve().parents[2]
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.I)
OUTPUT_KEEP = 64 << 10  # bytes of a candidate's stdout and stderr kept (the tail); the rest is counted, dropped
# Shells run by a build tool (ninja and nvcc run their steps through sh): no helpers.
SHELLS = frozenset({"sh", "dash", "bash"})
_BUILDERS = frozenset({"ninja", "make", "nvcc", "gcc", "g++", "cc", "c++", "clang", "clang++"})


def trusted_env(extra: dict) -> dict:
    """The caller's environment without credentials, with this repository importable (the judge)."""
    e = {k: v for k, v in os.environ.items() if not _SECRET.search(k) and k != "TRITON_INTERPRET"}
    e["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    e.update(extra)
    return e


# -- processes --------------------------------------------------------------------------------
def children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    out, stack = [], [pid]
    while stack:
        kids = children(stack.pop())
        out += kids
        stack += kids
    return out


def pid_namespace(pid: int) -> str | None:
    """The PID namespace a process is in ('pid:[4026532...]'), or None when it is gone or unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def in_namespace(ns: str) -> list[int]:
    """Every live process, seen from here, whose PID namespace is `ns` (a zombie is dead already:
    only its exit status waits for its parent)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and pid_namespace(int(name)) == ns and _state(int(name)) not in "ZX":
            out.append(int(name))
    return out


def tree_rss(pids) -> int:
    """Resident bytes of processes."""
    total = 0
    for p in pids:
        try:
            m = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{p}/status").read_text())
            total += int(m.group(1)) * 1024 if m else 0
        except OSError:
            continue
    return total


def program(pid: int) -> str | None:
    """The executable a process runs (its real path), or its name when that is unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return None


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _argv(pid: int) -> list[bytes] | None:
    """A process's command line, or None when it is gone or unreadable."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return None


def _script(pid: int) -> str | None:
    """The script a shell runs (its first argument, when not an option), or None."""
    argv = _argv(pid)
    return argv[1].decode(errors="replace") if argv and len(argv) > 1 and argv[1] and not argv[1].startswith(b"-") else None


def _load_probe(pid: int, argv: list[bytes] | None = None) -> bool:
    """Whether a process's command line (argv, if read) is `PYTHON -c CODE`, CODE only dlopening a file."""
    argv = _argv(pid) if argv is None else argv
    return argv is not None and len(argv) == 3 and argv[1] == b"-c" and dlopen_only(argv[2].decode(errors="replace"))


def _sigkill(pids) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_popen(proc: subprocess.Popen | None) -> None:
    if proc is None:
        return
    _sigkill(descendants(proc.pid))  # children that left the session too
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _sigkill([proc.pid])
    proc.wait()


def tail(f, n: int = 2000) -> str:
    """The last n bytes of a log the supervisor holds open (never reopened by path)."""
    try:
        end = f.seek(0, 2)
        f.seek(max(0, end - n))
        return f.read(n).decode(errors="replace")
    except (OSError, ValueError):
        return ""


class OutputTail:
    """What a candidate writes to stdout and stderr: read from a pipe as it comes, the last
    OUTPUT_KEEP bytes kept in memory, the rest counted and dropped. Nothing it prints reaches a
    disk, however much it prints; it never blocks on a full pipe."""

    def __init__(self, fd: int):
        self.fd, self.buf, self.total = fd, bytearray(), 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._drain, name="ablate-candidate-output", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        try:
            while chunk := os.read(self.fd, 1 << 16):
                with self.lock:
                    self.total += len(chunk)
                    self.buf += chunk
                    if len(self.buf) > 2 * OUTPUT_KEEP:
                        del self.buf[:-OUTPUT_KEEP]
        except OSError:
            pass
        finally:
            os.close(self.fd)

    def text(self, n: int = 2000) -> str:
        with self.lock:
            return bytes(self.buf[-n:]).decode(errors="replace")

    def close(self, wait: float = 2.0) -> None:
        """Wait for the end of the output (every writer gone); a daemon thread stays otherwise."""
        self.thread.join(wait)


class _Server:
    """A long-lived helper process speaking on a socket (see _channel)."""

    def __init__(self, cmd: list[str], environ: dict, cwd: str, log=None):
        self.log = log or tempfile.TemporaryFile()
        mine, theirs = _channel.pair()
        cmd = [c.replace("{fd}", str(theirs.fileno())) for c in cmd]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=environ,
                                     cwd=cwd, start_new_session=True, pass_fds=[theirs.fileno()])
        theirs.close()
        self.ch = _channel.Channel(mine)
        self.pending: list = []

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, kind: str, fds=(), **msg) -> None:
        self.ch.send(kind, fds=fds, **msg)

    def log_tail(self, n: int = 3000) -> str:
        return tail(self.log, n)

    def says(self, limit: float | None) -> dict:
        """The next message (descriptors closed: servers send none to the supervisor)."""
        if self.pending:
            return self.pending.pop(0)
        name = type(self).__name__.lower()
        try:
            got = self.ch.recv(limit)
        except _channel.Closed:
            raise EvaluatorFailure(f"{name} process died: {self.log_tail()}") from None
        except _channel.Malformed as e:
            raise EvaluatorFailure(f"{name} sent a malformed message: {e}") from None
        if got is None:
            raise EvaluatorFailure(f"{name} did not answer within {limit:.0f} s")
        msg, fds = got
        _channel.close_all(fds)
        return msg

    def close(self) -> None:
        self.ch.close()
        kill_popen(self.proc)
        self.log.close()


class Judge(_Server):
    """The judge (_judge), kept warm between evaluations: torch is imported once."""

    def __init__(self):
        super().__init__([sys.executable, "-m", "ablate.evaluate._judge", "{fd}", str(os.getpid())], trusted_env({}),
                         tempfile.gettempdir())

    def progress(self, report) -> None:
        """Hand the judge's progress lines that have arrived to `report` (str -> None), without
        waiting; any other message is kept for says()."""
        while True:
            try:
                got = self.ch.recv(0)
            except (_channel.Closed, _channel.Malformed):
                return  # says() reports it
            if got is None:
                return
            msg, fds = got
            _channel.close_all(fds)
            if msg.get("kind") == "progress":
                if report is not None:
                    report(str(msg.get("message")))
            else:
                self.pending.append(msg)


class Candidate:
    """One candidate: a fresh interpreter in a sandbox of its own, for one evaluation. It may be
    started ahead of its evaluation (a spare): it imports torch, sets the device up, and waits
    for the judge's "go", having run nothing else. What the supervisor holds of it: its socket to
    the judge (handed to the judge), the tail of its output, its evaluation directory, and how to
    watch and kill its processes."""

    python = os.path.realpath(sys.executable)

    def __init__(self, device: str):
        conf = _kit.confinement()
        self.confined, self.sandbox = bool(conf.mode), conf.kind
        self.root = Path(tempfile.mkdtemp(prefix="ablate-cand-", dir=_kit.scratch()))
        self.root.chmod(0o755)
        (self.root / "kit").mkdir(mode=0o755)  # the kit's mount point
        self.work, self.name = _kit.evaluation_dir(self.root, self.confined)
        mine, theirs = _channel.pair()
        boot = [sys.executable, "-E", "-B", "-c", _kit.BOOT]
        cmd, inner_root, inner_kit = conf.wrap(self.root, _kit.kit(), boot, device)
        self.inner = f"{inner_root}/{self.name}"  # the evaluation directory as the candidate sees it
        cmd += [inner_kit, str(theirs.fileno())]
        out_r, out_w = os.pipe()
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, cwd=self.root,
                                         env=_kit.candidate_env(self.inner, device, self.confined),
                                         start_new_session=True, pass_fds=[theirs.fileno()])
        except BaseException:
            os.close(out_r)
            raise
        finally:
            os.close(out_w)
            theirs.close()
        self.output = OutputTail(out_r)
        self.judge_end: _channel.Channel | None = _channel.Channel(mine)
        self.pid = self.proc.pid
        self.ns: str | None = None  # its sandbox's PID namespace, once seen
        self.init: int | None = None  # that namespace's init (bubblewrap's), seen from here

    def submit(self, data: bytes) -> None:
        """kernel.py into the fresh evaluation directory: nothing stale beside it, no link followed."""
        _kit.write_new(self.root, (self.name, "submission", "kernel.py"), data)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if self.confined and rc is not None and rc > 128:
            return 128 - rc  # bubblewrap reports its child's fatal signal as 128 + signal
        return rc

    def _note_namespace(self) -> None:
        if self.confined and self.ns is None:
            for p in children(self.proc.pid):
                ns = pid_namespace(p)
                if ns is not None and ns != pid_namespace(self.proc.pid):
                    self.ns, self.init = ns, p
                    return

    def processes(self) -> list[int]:
        """The candidate's process tree, each process before its children."""
        if not self.alive():
            return []
        self._note_namespace()
        return [self.proc.pid, *descendants(self.proc.pid)]

    def private_bytes(self) -> int:
        """Bytes written to its private tmpfs (what files there hold: memory no process's RSS shows)."""
        if self.init is None:
            return 0
        try:
            st = os.statvfs(f"/proc/{self.init}/root/tmp")
        except OSError:
            return 0
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def helpers(self) -> list[tuple[int, str, str]]:
        """(pid, program, kind) of each process in the candidate's tree other than its one Python
        interpreter (the first met from the root), its sandbox, and the compilers and build tools
        its libraries start (BUILD_TOOLS, from system or toolchain directories). kind: "program";
        "copy" (a Python with the interpreter's own command line, or none readable: maybe a child
        between fork and exec, a compiler's subprocess, which the supervisor counts only when it is
        still there later); "python" (a Python exec'd with a command line of its own); "probe"
        (torch.compile's load check, _guard.dlopen_only, which a busy machine can take a while to
        run)."""
        found, main, main_argv = [], False, None
        trusted = SYSTEM_PROGRAMS + tuple(os.path.join(p, "") for p in {sys.prefix, sys.base_prefix})
        for p in self.processes():
            exe = program(p)
            if exe is None:
                continue
            exe = exe.removesuffix(" (deleted)")
            base = os.path.basename(exe)
            python = base.startswith("python") or os.path.realpath(exe) == self.python
            if base == "bwrap" or (python and not main):
                if python:
                    main, main_argv = True, _argv(p)
                continue
            if not python and "/" not in exe:
                continue  # gone before its path could be read (only its name): nothing left to judge
            if not python and os.path.realpath(exe).startswith(trusted) and self._build_step(p, exe):
                continue
            kind = "program"
            if python:
                argv = _argv(p)  # a copy of the interpreter is not dumpable either: its command line reads empty
                kind = "probe" if _load_probe(p, argv) else "copy" if argv in (None, [b""], main_argv) else "python"
            found.append((p, exe, kind))
        return found

    @staticmethod
    def _build_step(pid: int, exe: str) -> bool:
        name = tool_name(exe)
        if name in BUILD_TOOLS:
            return True
        if name in SHELLS:
            script = _script(pid)
            parent = _parent(pid)
            up = program(parent) if parent else None
            return (script is not None and tool_name(script) in BUILD_TOOLS) or \
                (up is not None and tool_name(up.removesuffix(" (deleted)")) in _BUILDERS)
        return False

    def log_tail(self) -> str:
        return self.output.text()

    def kill(self) -> None:
        """Kill its whole sandbox: the namespace's init first (the kernel then kills every
        process in the namespace, however it was started), bubblewrap, then any process still
        found in the namespace, until none is left."""
        self._note_namespace()
        if self.init is not None and self.proc.poll() is None:
            _sigkill([self.init])
            try:
                self.proc.wait(2)  # bubblewrap reaps its init and exits
            except subprocess.TimeoutExpired:
                pass
        kill_popen(self.proc)
        if self.ns is not None:
            deadline = time.monotonic() + 10
            while (left := in_namespace(self.ns)) and time.monotonic() < deadline:
                _sigkill(left)
                time.sleep(0.01)

    def close(self) -> None:
        """Kill it and everything it left, close its socket and output, remove its directory."""
        self.kill()
        if self.judge_end is not None:
            self.judge_end.close()
            self.judge_end = None
        self.output.close()
        shutil.rmtree(self.root, ignore_errors=True)


class Pool:
    """Idle warm servers by key; one evaluation uses one at a time."""

    def __init__(self, make):
        self.make, self.idle, self.lock = make, {}, threading.Lock()

    def acquire(self, key):
        with self.lock:
            while self.idle.get(key):
                s = self.idle[key].pop()
                if s.alive():
                    return s
                s.close()
        return self.make()

    def release(self, key, server) -> None:
        with self.lock:
            self.idle.setdefault(key, []).append(server)

    def close(self) -> None:
        with self.lock:
            for servers in self.idle.values():
                for s in servers:
                    s.close()
            self.idle.clear()


class Spares:
    """One candidate started ahead per key, so an evaluation need not wait for torch to import and
    the device to start. A spare is fresh until used (it has run nothing but the evaluator's own
    start-up, in a sandbox of its own) and used once: take() hands it out and forgets it."""

    def __init__(self):
        self.idle: dict = {}
        self.lock = threading.Lock()

    def take(self, key, device: str) -> Candidate:
        with self.lock:
            spare = self.idle.pop(key, None)
        if spare is not None and spare.alive():
            return spare
        if spare is not None:
            spare.close()
        return Candidate(device)

    def refill(self, key, device: str) -> None:
        if os.environ.get("ABLATE_EVAL_SPARE") == "0":
            return
        with self.lock:
            if key not in self.idle:
                self.idle[key] = Candidate(device)

    def close(self) -> None:
        with self.lock:
            for spare in self.idle.values():
                spare.close()
            self.idle.clear()


JUDGES = Pool(Judge)
SPARES = Spares()


@atexit.register
def shutdown() -> None:
    """Stop the warm processes (they also exit when this process does: their sockets close)."""
    JUDGES.close()
    SPARES.close()
    _kit.discard_kit()
