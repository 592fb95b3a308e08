"""The processes the supervisor manages: warm judges, warm CPU zygotes, candidate processes, the
sandbox around candidates, and killing whatever a candidate leaves behind. Standard library only."""
from __future__ import annotations

import atexit
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.I)
_bwrap: list[bool] = []


class EvaluatorFailure(RuntimeError):
    """The evaluator itself failed (not the submission); the CLI exits 2."""


def env(extra: dict) -> dict:
    """The caller's environment without credentials, with this repository importable."""
    e = {k: v for k, v in os.environ.items() if not _SECRET.search(k) and k != "TRITON_INTERPRET"}
    e["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    e.update(extra)
    return e


def scratch() -> str | None:
    """Where evaluation files go: RAM-backed /dev/shm when there is room (outputs can be GBs)."""
    if os.environ.get("ABLATE_EVAL_TMP"):
        return os.environ["ABLATE_EVAL_TMP"]
    try:
        st = os.statvfs("/dev/shm")
        if os.access("/dev/shm", os.W_OK) and st.f_bavail * st.f_frsize > 8 << 30:
            return "/dev/shm"
    except OSError:
        pass
    return None


def _bwrap_ok() -> bool:
    if not _bwrap:
        try:
            r = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
                                "--unshare-pid", "true"], capture_output=True, timeout=20)
            _bwrap.append(r.returncode == 0)
        except (OSError, subprocess.TimeoutExpired):
            _bwrap.append(False)
    return _bwrap[0]


def sandbox(writable: Path) -> list[str]:
    """bubblewrap: the file system read-only except `writable` (TMPDIR points there), a private
    /dev/shm, its own PID namespace (it cannot see or signal the judge). Empty when bubblewrap is
    unusable here."""
    if os.environ.get("ABLATE_EVAL_SANDBOX") == "none" or not shutil.which("bwrap") or not _bwrap_ok():
        return []
    return ["bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc",
            "--bind", str(writable), str(writable), "--unshare-pid", "--die-with-parent", "--new-session", "--"]


def descendants(pid: int) -> list[int]:
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                kids = [int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
                out += kids
                stack += kids
        except (OSError, ValueError):
            continue
    return out


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants."""
    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            m = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{p}/status").read_text())
            total += int(m.group(1)) * 1024 if m else 0
        except OSError:
            continue
    return total


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


def tail(path: Path, n: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class _Server:
    """A long-lived helper process speaking JSON lines on stdin/stdout."""

    def __init__(self, cmd: list[str], environ: dict, cwd: str):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env=environ, cwd=cwd, text=True, start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.pending: list[dict] = []  # messages taken off the queue early (see Judge.progress)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, msg: dict) -> None:
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def log_tail(self, n: int = 3000) -> str:
        self.log.seek(max(0, self.log.seek(0, 2) - n))
        return self.log.read().decode(errors="replace")

    def says(self, limit: float) -> dict:
        if self.pending:
            return self.pending.pop(0)
        try:
            line = self.lines.get(timeout=limit)
        except queue.Empty:
            raise EvaluatorFailure(f"{type(self).__name__.strip('_').lower()} did not answer within {limit:.0f} s") from None
        if line is None:
            raise EvaluatorFailure(f"{type(self).__name__.strip('_').lower()} process died: {self.log_tail()}")
        return json.loads(line)

    def close(self) -> None:
        kill_popen(self.proc)
        self.log.close()


class Judge(_Server):
    """The judge (_checker), kept warm between evaluations: torch is imported once."""

    def __init__(self):
        super().__init__([sys.executable, "-m", "ablate.evaluate._checker"], env({}), tempfile.gettempdir())

    def progress(self, report) -> None:
        """Hand the judge's progress lines that have arrived to `report` (str -> None), without
        waiting; any other message is kept for says()."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return
            msg = json.loads(line) if line is not None else None
            if isinstance(msg, dict) and msg.get("kind") == "progress":
                if report is not None:
                    report(str(msg.get("message")))
            elif line is None:
                self.lines.put(None)  # the end of its output: says() reports it
                return
            else:
                self.pending.append(msg)


class Zygote(_Server):
    """The CPU zygote (_zygote), sandboxed once, forking a fresh child per evaluation. Its
    evaluation directories live under its own root, the only place it may write."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="ablate-zygote-", dir=scratch()))
        self.prefix = sandbox(self.root)
        super().__init__(self.prefix + [sys.executable, "-m", "ablate.evaluate._zygote"],
                         env({"PYTHONDONTWRITEBYTECODE": "1"}), str(self.root))
        self.inner = None  # the zygote's pid inside its namespace, from "hello"
        self.exits: dict[int, int] = {}

    def outer_pid(self, inner: int) -> int | None:
        """The pid, seen from here, of a process the zygote's namespace calls `inner`."""
        if not self.prefix:
            return inner
        for p in descendants(self.proc.pid):
            try:
                m = re.search(r"NSpid:\s+([\d\s]+)", Path(f"/proc/{p}/status").read_text())
            except OSError:
                continue
            if m and int(m.group(1).split()[-1]) == inner:
                return p
        return None

    def pump(self, limit: float) -> dict | None:
        """The next message that is not a child's exit (exits are recorded), or None on timeout."""
        deadline = time.monotonic() + limit
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                raise EvaluatorFailure(f"zygote process died: {self.log_tail()}")
            msg = json.loads(line)
            if msg.get("kind") == "exit":
                self.exits[msg["pid"]] = msg["returncode"]
            else:
                return msg

    def start(self) -> None:
        msg = self.pump(120)
        if not msg or msg.get("kind") != "hello":
            raise EvaluatorFailure(f"zygote did not start: {self.log_tail()}")
        self.inner = msg["pid"]

    def sweep(self) -> None:
        """Kill every process in the sandbox but the zygote and the sandbox's own: whatever a
        finished candidate left running, reparented or not."""
        zyg = self.outer_pid(self.inner)
        if zyg is None:
            return
        keep, p = {zyg}, zyg
        while p not in (self.proc.pid, 1, 0):  # the zygote's ancestors up to the sandbox
            try:
                p = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
            keep.add(p)
        root = self.proc.pid if self.prefix else zyg
        _sigkill([q for q in descendants(root) if q not in keep])

    def close(self) -> None:
        if self.alive():
            _sigkill(descendants(self.proc.pid))
        super().close()
        shutil.rmtree(self.root, ignore_errors=True)


def workdir(root: str | Path | None) -> Path:
    """A fresh evaluation directory: the submission's own folder, outputs, HOME, caches, TMPDIR."""
    work = Path(tempfile.mkdtemp(prefix="ablate-eval-", dir=root))
    for d in ("submission", "out", "home", "cache", "tmp"):
        (work / d).mkdir()
    (work / "result.jsonl").touch()
    return work


def candidate_env(work: Path, device: str) -> dict:
    """Fresh compiler caches per evaluation: nothing built by an earlier candidate can run."""
    cache = work / "cache"
    return env({"HOME": str(work / "home"), "TMPDIR": str(work / "tmp"), "TRITON_CACHE_DIR": str(cache / "triton"),
                "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"), "CUPY_CACHE_DIR": str(cache / "cupy"),
                "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "PYTHONDONTWRITEBYTECODE": "1",
                "ABLATE_EVAL_DEVICE": device})


class Spawned:
    """A candidate in a fresh interpreter (the GPU path). It may be started ahead of its
    evaluation (a spare): it imports torch, sets CUDA up, and waits for "go" on stdin."""

    def __init__(self, device: str, work: Path | None = None):
        self.work = work or workdir(scratch())
        self.prefix = sandbox(self.work)
        self.sandbox = "bwrap" if self.prefix else "process"
        self.log = open(self.work / "candidate.log", "wb")
        self.proc = subprocess.Popen(self.prefix + [sys.executable, "-m", "ablate.evaluate._driver"],
                                     stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=self.work / "submission", env=candidate_env(self.work, device),
                                     start_new_session=True)
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def go(self, go: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(go) + "\n").encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died already; poll() says so

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if self.prefix and rc is not None and rc > 128:
            return 128 - rc  # bubblewrap reports its child's fatal signal as 128 + signal
        return rc

    def kill(self) -> None:
        kill_popen(self.proc)

    def close(self) -> None:
        """For a spare never used: stop it and remove its directory."""
        self.kill()
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)


class Forked:
    """A candidate forked from a warm zygote (the CPU path)."""

    def __init__(self, zygote: Zygote, go: dict, work: Path, device: str):
        self.zygote = zygote
        self.sandbox = "bwrap" if zygote.prefix else "process"
        zygote.send({"go": go, "env": candidate_env(work, device), "cwd": str(work / "submission"),
                     "log": str(work / "candidate.log")})
        msg = zygote.pump(60)
        if not msg or msg.get("kind") != "forked":
            raise EvaluatorFailure(f"zygote did not fork: {zygote.log_tail()}")
        self.inner = msg["pid"]
        self.pid = zygote.outer_pid(self.inner) or -1

    def poll(self) -> int | None:
        if not self.zygote.alive():
            return -signal.SIGKILL  # the candidate took its zygote down with it
        self.zygote.pump(0)
        return self.zygote.exits.get(self.inner)

    def kill(self) -> None:
        if self.pid > 0 and self.poll() is None:
            _sigkill([self.pid, *descendants(self.pid)])
        if self.zygote.alive():
            self.zygote.sweep()


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
    """One candidate started ahead per key, so an evaluation on the GPU path need not wait for
    torch to import and CUDA to start. Each is still a fresh process that ran nothing yet."""

    def __init__(self):
        self.idle: dict = {}
        self.lock = threading.Lock()

    def take(self, key, device: str) -> Spawned:
        with self.lock:
            spare = self.idle.pop(key, None)
        if spare is not None and spare.alive():
            return spare
        if spare is not None:
            spare.close()
        return Spawned(device)

    def refill(self, key, device: str) -> None:
        if os.environ.get("ABLATE_EVAL_SPARE") == "0":
            return
        with self.lock:
            if key not in self.idle:
                self.idle[key] = Spawned(device)

    def close(self) -> None:
        with self.lock:
            for spare in self.idle.values():
                spare.close()
            self.idle.clear()


JUDGES = Pool(Judge)
ZYGOTES = Pool(Zygote)
SPARES = Spares()


@atexit.register
def shutdown() -> None:
    """Stop the warm processes (they also exit when this process does: their stdin closes)."""
    JUDGES.close()
    ZYGOTES.close()
    SPARES.close()
