"""The candidate's guard: set up in the candidate process before the submission is imported, in
force until the process ends. It keeps the kernel honest where the judge's evidence does not
reach: the judge's own clock and its reads of the outputs' raw memory are the evidence of a
verdict; this guard is what turns a kernel's reach for the evaluator's objects, its own memory,
or another program into a rejection (forbidden_code) rather than a silent advantage.

install(): an audit hook (PEP 578; once added it cannot be removed) that refuses
  - whoever asks (no library needs them while a kernel runs; a callback, a finalizer or a
    library helper can run them on the kernel's behalf, so who asks cannot decide):
    the garbage collector's object graph (gc.get_objects / get_referrers / get_referents), every
    thread's frames (sys._current_frames / _current_exceptions), new audit hooks, fork without
    exec, a shell (os.system, pty.spawn); and every process start except the compilers and
    build tools of BUILD_TOOLS, run from a read-only system or toolchain directory (one named
    bare that no PATH entry holds fails with FileNotFoundError before anything is looked up
    again, unlogged: torch.compile asks for `nvcc --version` on a GPU and carries on without);
  - whoever asks: reading the defaults of a function holding the operator watch's switch
    (_watch.SEALED: torch.compile inlining it would read them);
  - whoever asks: opening a file named ``mem`` or any path that resolves into
    ``/proc/<pid>/[task/<tid>/]mem`` (``//proc/self/mem``, ``/proc/thread-self/mem``,
    ``/dev/fd/N/mem``, links: the path is resolved with functions bound at install, never the
    os module's), and making a link to one;
  - when the submission asks: frames (sys._getframe, a traceback's tb_frame, f_code, gi_frame,
    ...), tracing and profiling hooks, replacing a function's code or defaults, building
    functions or code objects, exec/eval/compile, unmarshalling and unpickling code, ctypes,
    any process start, and importing a kernel library (_library_ops.KERNEL_LIBRARIES: logged as a
    library passthrough; importlib raises no audit event, so the sandbox, which does not show
    them, is what stops a computed name);
  - signal handlers: the submission cannot install one (a handler is handed the interrupted
    frame: the driver's, mid-loop); a handler a library installs is handed no frame.
A refused call raises PermissionError inside the kernel and is logged; the judge rejects the
kernel as forbidden_code whatever the kernel did with the error. One exception: a new audit hook a
library tries to add is refused (Python then never adds it) but not logged, since nothing happened
(filelock adds one when imported on Python 3.12, and torch.compile imports filelock).

Who asks: the first frame, walking outwards from the event, that is not in a proxy: a module whose
job is to hand frames, code, objects or processes to its caller, or to call what its caller hands
it (PROXIES: inspect, traceback, weakref, unittest.mock, functools, signal, ...; LIBRARY_PROXIES:
torch._jit_internal, torch.jit, torch.fx, ...). A frame of the submission's file, or of code with
no file (built from a string), or of a file anywhere else the submission could write, is the
submission; a library's frame (triton compiling, torch building an extension) is not.

What it cannot see (the integrity snapshot, _integrity, and the judge's own evidence cover some):
  - reads that raise no audit event: ``__subclasses__`` and ``__mro__`` walks, a function's
    ``__globals__``, ``__closure__`` and ``__builtins__``, a frame's ``f_globals``/``f_back``
    once it has a frame: these reach the evaluator's modules and classes, and writes through
    them (a module's dict, a class's attributes, a closure's cell) raise none either. The
    integrity snapshot compares what the driver relies on after every call (driver_tampered),
    so a write is caught unless it is undone before the driver looks;
  - frames and objects a library helper not on the proxy lists returns to its caller, and
    C-level callables (gc, sys._getframe) run from a callback that a library frame triggers
    (a finalizer run while torch code drops an object): who asks is then that library;
  - C code: torch._C (set_eval_frame, the dispatcher), ctypes loaded before the guard, an
    extension the kernel builds (cpp_extension, CuPy): native code reads and writes the
    process's memory unseen. The static scan refuses the spellings; the judge's evidence does
    not depend on this process;
  - processes started below Python's audit events (_posixsubprocess.fork_exec): the supervisor
    sees them in the sandbox's process tree (helper_process), unless they end within its poll
    (or, for a Python whose command line is torch.compile's load check, within 10 s: native code
    it loads runs that long beside the kernel, as the kernel's own extensions could);
  - an open relative to a directory descriptor (os.open(name, dir_fd=...)) of a link another
    process made: the path is resolved against the working directory.
"""
from __future__ import annotations

import os
import re
import sys

# Events that can reach the driver's objects or run hidden code, refused when the submission asks.
REFUSED = frozenset({
    "sys._getframe", "sys._getframemodulename",
    "object.__getattr__",  # tb_frame, f_code, gi_frame, gi_code, cr_frame, ag_frame, __code__, __defaults__
    "sys.settrace", "sys.setprofile", "sys.monitoring.register_callback",
    "object.__setattr__", "object.__delattr__",  # a function's __code__/__defaults__/__kwdefaults__
    "function.__new__", "code.__new__", "exec", "compile", "marshal.loads", "marshal.load", "pickle.find_class",
    "os.kill", "os.killpg",  # signals to other processes (the one that started it, a compiler)
})
# Refused whoever asks.
ALWAYS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames", "sys._current_exceptions",
    "sys.addaudithook", "os.fork", "os.forkpty", "os.system", "pty.spawn", "os.startfile", "sys.remote_exec",
})
# Process starts: event -> index of the program in its arguments. Allowed only when a library asks
# and the program is a build tool (BUILD_TOOLS) from a read-only place.
STARTS = {"subprocess.Popen": 0, "os.exec": 0, "os.posix_spawn": 0, "os.spawn": 1}
# What a kernel's libraries may start while it runs, by program name (a target triplet and a
# version aside: x86_64-linux-gnu-gcc-12 is gcc): compilers, assemblers, linkers, build tools and
# what they run, and the look-ups Triton and torch's extension builder make. The supervisor holds
# the processes it sees in the sandbox to the same list (a shell only as a build tool's child).
BUILD_TOOLS = frozenset({
    "cc", "gcc", "g++", "c++", "cpp", "clang", "clang++", "cc1", "cc1plus", "collect2", "lto-wrapper", "lto1",
    "as", "ld", "ld.bfd", "ld.gold", "ld.lld", "ar", "ranlib", "objcopy", "ninja", "make", "nvcc", "ptxas", "cicc",
    "fatbinary", "nvlink", "cudafe++", "nvdisasm", "cuobjdump", "bin2c", "ldconfig", "ldconfig.real", "which",
    "uname", "file", "openssl"})  # file: Triton asks what a library is (seen on an H200); openssl: Inductor hashes its headers
# Read-only places programs may come from (inside the sandbox everything but /tmp is read-only;
# unconfined, these are the system's).
SYSTEM_PROGRAMS = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/opt/")
_TRIPLET = re.compile(r"^(?:[a-z0-9_]+-)+(?:linux|gnu|gnueabihf|elf)-(?=.)")
_VERSION = re.compile(r"-\d+(?:\.\d+)*$")
_MEM = re.compile(r"^/proc/[^/]+/(?:task/[^/]+/)?mem$")

# Standard-library modules that pass frames, code, objects or processes on to whoever called
# them, or call what their caller hands them: the decision is their caller's.
PROXIES = ("inspect", "traceback", "logging", "asyncio", "subprocess", "multiprocessing", "concurrent",
           "os", "pty", "ctypes", "bdb", "pdb", "cProfile", "profile", "trace", "code", "codeop", "runpy",
           "threading", "_threading_local", "contextlib", "functools", "types", "copy", "copyreg", "pickle",
           "shlex", "platform", "shutil", "doctest", "timeit", "tracemalloc", "faulthandler", "sysconfig",
           "weakref", "_weakrefset", "unittest", "signal", "operator", "sched", "queue", "atexit", "gc", "dis",
           "pydoc", "reprlib", "pprint", "json", "csv", "heapq", "bisect", "itertools", "_collections_abc")
# Library files (under site-packages) that walk frames, or build functions, for their caller.
LIBRARY_PROXIES = ("torch/_jit_internal.py", "torch/jit/", "torch/fx/", "torch/package/", "torch/utils/_traceback.py",
                   "torch/_dynamo/bytecode_debugger.py", "torch/testing/", "torch/_sources.py", "_pytest/")


def tool_name(path: str) -> str:
    """A program's name without its directory, target triplet and version: 'gcc' for
    /usr/bin/x86_64-linux-gnu-gcc-12."""
    return _VERSION.sub("", _TRIPLET.sub("", os.path.basename(path)))


def dlopen_only(code: str) -> bool:
    """Whether `python -c CODE` is torch.compile's check that a vectorised library it built loads
    (torch._inductor.cpu_vec_isa): CODE only dlopens one file. The guard lets a library start it;
    the supervisor's watch lets it live LOAD_PROBE_S. Operators and str methods only: no global
    name the submission could rebind reaches it."""
    return ("from ctypes import cdll" in code and "cdll.LoadLibrary(" in code and "subprocess" not in code
            and "os." not in code and code.count("\n") < 8)


def _code_roots(kit: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(proxy prefixes, library prefixes, program prefixes): where the standard library's and the
    libraries' proxy modules live, the read-only places library code is imported from (the
    interpreter's prefixes and site-packages, the evaluator's kit), and where programs may be
    started from. Raw and resolved forms, since frames carry the path an import used."""
    import site
    import sysconfig

    std = sysconfig.get_paths()["stdlib"]
    stds = {std, os.path.realpath(std)}
    sites = {*site.getsitepackages(), site.getusersitepackages(), *(p for p in sys.path if "-packages" in p)}
    sites |= {os.path.realpath(s) for s in sites}
    proxies = tuple(os.path.join(d, name) for d in stds for name in PROXIES)
    proxies += tuple(os.path.join(d, name) for d in sites if d for name in LIBRARY_PROXIES)
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, std, kit, *sites}
    roots |= {os.path.realpath(r) for r in roots}
    programs = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")}
    programs = {os.path.join(p, "") for p in programs if p} | set(SYSTEM_PROGRAMS)
    programs = {p for p in programs if not p.startswith(("/tmp/", "/dev/", "/proc/"))}
    return proxies, tuple(os.path.join(r, "") for r in roots if r), tuple(sorted(programs))


def install(submission_dir: str, kit_dir: str):
    """Add the audit hook and the signal-handler guard; returns the log, a list of (event, where)
    the driver reads after each call (findings). Everything the hook uses is bound now, so nothing
    the submission rebinds (a module's attribute, a builtin) reaches it."""
    from ablate.operators._library_ops import KERNEL_LIBRARIES

    import posix

    log: list = []
    busy = [False]
    kinds: dict = {}
    proxies, roots, programs = _code_roots(kit_dir)
    subs = (os.path.join(submission_dir, ""), os.path.join(os.path.realpath(submission_dir), ""))
    getframe, refused, always, starts = sys._getframe, REFUSED, ALWAYS, STARTS
    str_, bytes_, tuple_, list_, dict_, type_, perm, len_ = str, bytes, tuple, list, dict, type, PermissionError, len
    startswith, endswith, split, rsplit, join, decode = (str.startswith, str.endswith, str.split, str.rsplit, str.join,
                                                         bytes.decode)
    lstat, readlink, getcwd, environ = posix.lstat, posix.readlink, posix.getcwd, posix.environ
    islink = lambda mode: (mode & 0o170000) == 0o120000  # noqa: E731
    match_mem, tools, version_sub, triplet_sub = _MEM.match, BUILD_TOOLS, _VERSION.sub, _TRIPLET.sub
    sealed, id_ = _sealed(), id  # held, so their ids stay theirs
    sealed_ids = frozenset(id(f) for f in sealed)
    issubclass_, next_, oserror, notfound = issubclass, next, OSError, FileNotFoundError
    proxy_names = frozenset(PROXIES)
    interpreter = os.path.realpath(sys.executable)
    probe_code = dlopen_only

    def tool(path: str) -> str:  # tool_name, from what is bound here (the module's globals can be rewritten)
        return version_sub("", triplet_sub("", rsplit(path, "/", 1)[-1]))

    def kind(name: str) -> str:
        """'proxy', 'library' or 'submission' for the file a frame runs."""
        k = kinds.get(name)
        if k is None:
            if startswith(name, "<frozen "):  # the standard library, compiled in
                k = "proxy" if split(name[8:-1], ".")[0] in proxy_names else "library"
            elif startswith(name, "<") or startswith(name, subs):
                k = "submission"  # code built from a string, or the kernel's own file
            elif startswith(name, proxies):
                k = "proxy"
            elif startswith(name, roots):
                k = "library"
            else:
                k = "submission"  # a file the submission could have written (its tmp, home, caches)
            kinds[name] = k
        return k

    def filename(f) -> str:
        """A frame's file name as a plain str (a str subclass's own methods never run)."""
        name = f.f_code.co_filename
        return name if type_(name) is str_ else str_.__str__(name)

    def origin(depth: int = 2) -> str | None:
        """'file:line' of the submission's frame when it asked; None when a library did. depth:
        the frame to start from (2: the hook's caller)."""
        f = getframe(depth)
        while f is not None:
            name = filename(f)
            k = kind(name)
            if k == "submission":
                return f"{rsplit(name, '/', 1)[-1]}:{f.f_lineno}"
            if k == "library":
                return None
            f = f.f_back
        return "<no caller outside the standard library>"

    def library_frame(depth: int = 2) -> str:
        """'folder/file:line' of the innermost library frame: which library asked, for the message."""
        f = getframe(depth)
        while f is not None:
            name = filename(f)
            if kind(name) == "library":
                return f"{join('/', rsplit(name, '/', 2)[-2:])}:{f.f_lineno}"
            f = f.f_back
        return "?"

    def asker(depth: int) -> str | None:
        """origin() from outside the hook (the signal guard): the hook's own events pass meanwhile."""
        busy[0] = True
        try:
            return origin(depth + 1)
        finally:
            busy[0] = False

    def text(p) -> str | None:
        """A path argument as a plain str (bound methods only: a subclass's own methods never run)."""
        t = type_(p)
        if t is str_ or issubclass_(t, str_):
            return str_.__str__(p)
        if t is bytes_ or issubclass_(t, bytes_):
            return decode(bytes_(p), "utf-8", "replace")
        return None

    def real(path: str) -> str:
        """The path with every link resolved (os.path.realpath, from functions bound now)."""
        if not startswith(path, "/"):
            try:
                path = getcwd() + "/" + path
            except oserror:
                return path
        out: list = []
        todo = split(path, "/")[::-1]
        hops = 0
        while todo:
            c = todo.pop()
            if c in ("", "."):
                continue
            if c == "..":
                if out:
                    out.pop()
                continue
            here = "/" + join("/", out + [c])
            try:
                st = lstat(here)
                target = readlink(here) if islink(st.st_mode) and hops < 40 else None
            except oserror:
                target = None
            if target is None or startswith(target, ("pipe:", "socket:", "anon_inode:")):
                out.append(c)  # a file, a directory, or a link that names no path
                continue
            hops += 1
            if startswith(target, "/"):
                out = []
            todo.extend(split(target, "/")[::-1])
        return "/" + join("/", out)

    def names_mem(p: str) -> bool:
        """A path that names a process's memory, however it is spelled."""
        last = [c for c in split(p, "/") if c not in ("", ".")]
        return (bool(last) and last[-1] == "mem") or bool(match_mem(real(p)))

    def a_probe(event: str, args: tuple, prog: str) -> bool:
        """torch.compile's check that a library it built loads (dlopen_only): this interpreter
        as `-c CODE`. A Python that stays is a helper all the same (the supervisor's watch)."""
        if event != "subprocess.Popen" or real(prog) != interpreter or len_(args) < 2:
            return False
        a = args[1]
        if type_(a) not in (tuple_, list_) or len_(a) != 3 or text(a[1]) != "-c":
            return False
        code = text(a[2])
        return code is not None and probe_code(code)

    def program_ok(event: str, args: tuple) -> bool | None:
        """A process start a library may make: a build tool from a read-only place. None: a build
        tool by bare name that no PATH entry holds (torch.compile asks `nvcc --version` on a GPU
        with no nvcc on PATH), which the start would fail to find."""
        i = starts[event]
        prog = text(args[i]) if len_(args) > i else None
        if prog is None and event == "subprocess.Popen" and len_(args) > 1:
            a = args[1]
            prog = text(a) if type_(a) not in (tuple_, list_) else (text(a[0]) if len_(a) else None)
        if prog and a_probe(event, args, prog):
            return True
        if not prog or tool(prog) not in tools:
            return False
        if "/" in prog:
            return startswith(real(prog), programs)
        env = args[-1] if event in ("subprocess.Popen", "os.posix_spawn") else args[2] if len_(args) > 2 else None
        path = None
        if type_(env) is dict_:
            path = next_((v for k, v in dict_.items(env) if type_(k) in (str_, bytes_) and text(k) == "PATH"), "")
        elif env is None:
            path = dict_.get(environ, b"PATH", b"")  # the process's own environment, as os.environ holds it
        for d in split(text(path) or "", ":"):  # the program the start will find: the first on PATH
            cand = (d or ".") + "/" + prog
            try:
                lstat(cand)
            except oserror:
                continue
            return startswith(real(cand), programs)
        return None

    libraries, partition = frozenset(KERNEL_LIBRARIES), str.partition

    def hook(event: str, args: tuple) -> None:
        if event == "import" and args and type_(args[0]) is str_ and partition(args[0], ".")[0] in libraries:
            if busy[0]:
                return
            busy[0] = True
            try:
                where = origin()  # None: torch looking for one itself (it finds none: the sandbox hides them)
            finally:
                busy[0] = False
            if where is not None:
                log.append((f"import {args[0]}", where))
                raise perm(f"ablate: importing {args[0]} is not allowed in a kernel: it is a kernel library")
            return
        if event == "open" or event == "os.symlink":
            p = text(args[0]) if args else None
            if p is not None and names_mem(p):
                log.append((event, p))
                raise perm(f"ablate: {'opening' if event == 'open' else 'linking to'} {p} is not allowed in a kernel")
            if event == "os.symlink" and len_(args) > 1 and (q := text(args[1])) is not None and names_mem(q):
                log.append((event, q))
                raise perm(f"ablate: a link named {q} is not allowed in a kernel")
            return
        if event == "object.__getattr__" and args and id_(args[0]) in sealed_ids:
            name = args[1] if len_(args) > 1 else "?"
            log.append((f"{event} {name}", "whoever asks: a function holding the operator watch's switch"))
            raise perm(f"ablate: reading {name} of the operator watch's own function is not allowed")
        if busy[0]:
            return  # an event raised by this hook's own frame walk (sys._getframe, f_code)
        if event in always:
            where = "whoever asks"
            busy[0] = True
            try:
                where = origin() or f"a library, on the kernel's behalf: {library_frame()}"
            finally:
                busy[0] = False
            if event != "sys.addaudithook" or not startswith(where, "a library"):
                log.append((event, where))
            # (a hook refused is a hook Python never adds, so a library's try costs the kernel
            # nothing: filelock adds one when imported on Python 3.12, and torch.compile imports it)
            raise perm(f"ablate: {event} is not allowed while a kernel runs ({where})")
        start = event in starts
        if not start and event not in refused and not startswith(event, "ctypes."):
            return
        busy[0] = True
        try:
            if event in ("object.__setattr__", "object.__delattr__") and args and type_(args[0]) is type_:
                return  # python raises these for functions only; a class's attributes raise nothing
            where = origin()
            if where is not None and startswith(event, "object.") and len_(args) > 1 and type_(args[1]) is str_:
                event = f"{event} {args[1]}"
            ok = program_ok(event, args) if where is None and start else True
            if ok is not True:
                name = f"{text(args[starts[event]]) or args[1:2]!r:.120}"
                if ok is False:
                    where = f"a library, on the kernel's behalf: {name}"
        finally:
            busy[0] = False
        if ok is None:
            # failed as the system would fail it, and before the start looks on PATH again: a
            # program put there after this check never runs; nothing ran, so nothing is logged
            raise notfound(2, "No such file or directory (not on PATH)", name)
        if where is not None:
            log.append((event, where))
            raise perm(f"ablate: {event} is not allowed in a kernel ({where})")

    sys.addaudithook(hook)
    _guard_signals(log, asker)
    return log


def findings(entries: list) -> dict[str, str]:
    """{reason: what was refused} of new log entries: an operator library's import is a library
    passthrough, anything else forbidden code."""
    found = {}
    for reason, mine in (("library_passthrough", [e for e in entries if e[0].startswith("import ")]),
                         ("forbidden_code", [e for e in entries if not e[0].startswith("import ")])):
        if mine:
            found[reason] = "at run time: " + "; ".join(f"{e} ({w})" for e, w in mine[:5])
    return found


def _sealed() -> tuple:
    """The functions whose defaults hold the operator watch's real switches (_watch.SEALED, filled
    before the submission is imported): reading their defaults is refused whoever asks."""
    from ablate.evaluate import _watch

    return tuple(_watch.SEALED)


def _guard_signals(log: list, asker) -> None:
    """signal.signal as the submission sees it: refused when it asks; a handler a library
    installs is called without the interrupted frame. The real function stays in the wrapper's
    defaults (reading a function's defaults is an audited event, refused to the submission), and
    signal.signal's __wrapped__ names the wrapper."""
    import signal as signal_module

    import _signal

    def signal(signalnum, handler, _install=_signal.signal, _asker=asker, _log=log, _callable=callable,
               _perm=PermissionError):
        where = _asker(2)  # 0: asker, 1: this function, 2: its caller (signal.py's wrapper: a proxy)
        if where is not None:
            _log.append(("signal.signal", where))
            raise _perm(f"ablate: installing a signal handler is not allowed in a kernel ({where})")
        if _callable(handler):
            def frameless(signum, frame, _handler=handler):
                return _handler(signum, None)
            return _install(signalnum, frameless)
        return _install(signalnum, handler)

    signal.__doc__ = _signal.signal.__doc__
    _signal.signal = signal
    if getattr(signal_module.signal, "__wrapped__", None) is not None:
        signal_module.signal.__wrapped__ = signal
