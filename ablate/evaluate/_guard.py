"""The candidate's guard: set up in the candidate process before the submission is imported, in
force until the process ends.

install(): an audit hook (PEP 578; once added it cannot be removed) that refuses, when the
    submission's own code asks, the ways Python offers to reach objects it was not handed or to
    run code it does not show: frames (sys._getframe, a traceback's tb_frame, f_code, gi_frame,
    ...), tracing and monitoring hooks, the garbage collector's object graph, replacing a
    function's code or defaults, building functions or code objects, exec/eval/compile,
    unmarshalling and unpickling code, ctypes, fork/exec/spawn, new audit hooks, and
    /proc/<pid>/mem. (Python raises no audit event for most attribute writes on types and
    modules; the driver does not depend on those: it calls C-level callables it bound first, and
    the integrity snapshot reports such replacements.) A refused call raises PermissionError inside the kernel and is logged; the
    judge rejects the kernel as forbidden_code whatever the kernel did with the error.

Who asks: the first frame, walking outwards from the event, that is not in a module whose job is
to hand frames, code or processes to its caller (inspect, traceback, subprocess, ctypes, ...).
A frame of the submission's file, or of code with no file (built from a string), is the
submission; a library's frame (triton compiling, torch building an extension) is not."""
from __future__ import annotations

import os
import sys
import types

# Events that can reach the driver's objects or run hidden code, refused when the submission asks.
REFUSED = frozenset({
    "sys._getframe", "sys._getframemodulename", "sys._current_frames", "sys._current_exceptions",
    "object.__getattr__",  # tb_frame, f_code, gi_frame, gi_code, cr_frame, ag_frame, ...
    "sys.settrace", "sys.setprofile", "sys.monitoring.register_callback", "sys.addaudithook",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "object.__setattr__", "object.__delattr__",  # a type's attributes, a function's __code__/__defaults__
    "function.__new__", "code.__new__", "exec", "compile", "marshal.loads", "marshal.load", "pickle.find_class",
    "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system", "subprocess.Popen",
    "pty.spawn", "os.startfile", "sys.remote_exec",
})
# Standard-library modules that pass frames, code or processes on to whoever called them: the
# decision is their caller's.
PROXIES = ("inspect", "traceback", "logging", "asyncio", "subprocess", "multiprocessing", "concurrent",
           "os", "pty", "ctypes", "bdb", "pdb", "cProfile", "profile", "trace", "code", "codeop", "runpy",
           "threading", "_threading_local", "contextlib", "functools", "types", "copy", "copyreg", "pickle",
           "shlex", "platform", "shutil", "doctest", "timeit", "tracemalloc", "faulthandler", "sysconfig")


def _code_roots(kit: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(proxy prefixes, library prefixes): where the standard library's proxy modules live, and the
    read-only places library code is imported from (the interpreter's prefixes and site-packages,
    the evaluator's kit). Raw and resolved forms, since frames carry the path an import used."""
    import site
    import sysconfig

    std = sysconfig.get_paths()["stdlib"]
    stds = {std, os.path.realpath(std)}
    proxies = tuple(os.path.join(d, name) for d in stds for name in PROXIES)
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, std, kit, *site.getsitepackages(), site.getusersitepackages()}
    roots |= {os.path.realpath(r) for r in roots}
    return proxies, tuple(os.path.join(r, "") for r in roots if r)


def install(submission_dir: str, kit_dir: str):
    """Add the audit hook; returns its log, a list of (event, where) the driver reads after each
    call. Everything the hook uses is bound now, so nothing the submission rebinds reaches it."""
    log: list = []
    busy = [False]
    kinds: dict = {}
    proxies, roots = _code_roots(kit_dir)
    subs = (os.path.join(submission_dir, ""), os.path.join(os.path.realpath(submission_dir), ""))
    getframe, refused, isinstance_, str_, bytes_ = sys._getframe, REFUSED, isinstance, str, bytes
    functype, methtype, type_, getattr_, perm = types.FunctionType, types.MethodType, type, getattr, PermissionError
    proxy_names = frozenset(PROXIES)

    def kind(name: str) -> str:
        """'proxy', 'library' or 'submission' for the file a frame runs."""
        k = kinds.get(name)
        if k is None:
            if name.startswith("<frozen "):  # the standard library, compiled in
                k = "proxy" if name[8:-1].split(".")[0] in proxy_names else "library"
            elif name.startswith("<") or name.startswith(subs):
                k = "submission"  # code built from a string, or the kernel's own file
            elif name.startswith(proxies):
                k = "proxy"
            elif name.startswith(roots):
                k = "library"
            else:
                k = "submission"  # a file the submission could have written (its tmp, home, caches)
            kinds[name] = k
        return k

    def origin() -> str | None:
        """'file:line' of the submission's frame when it asked; None when a library did."""
        f = getframe(2)
        while f is not None:
            name = f.f_code.co_filename
            k = kind(name)
            if k == "submission":
                return f"{name.rsplit('/', 1)[-1]}:{f.f_lineno}"
            if k == "library":
                return None
            f = f.f_back
        return "<no caller outside the standard library>"

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path = args[0] if args else None
            if isinstance_(path, bytes_):
                path = path.decode(errors="replace")
            if isinstance_(path, str_) and path.startswith("/proc/") and path.rstrip("/").endswith("/mem"):
                log.append((event, path))
                raise perm(f"ablate: opening {path} is not allowed in a kernel")
            return
        if event not in refused and not event.startswith("ctypes."):
            return
        if busy[0]:
            return  # an event raised by this hook's own frame walk
        busy[0] = True
        try:
            if event in ("object.__setattr__", "object.__delattr__") and args:
                target = args[0]
                if isinstance_(target, type_) and getattr_(target, "__module__", None) == "kernel":
                    return  # the submission's own classes are its own business
                if not isinstance_(target, (type_, functype, methtype)):
                    return
            where = origin()
            if where is not None and event.startswith("object.") and len(args) > 1 and isinstance_(args[1], str_):
                event = f"{event} {args[1]}"
        finally:
            busy[0] = False
        if where is not None:
            log.append((event, where))
            raise perm(f"ablate: {event} is not allowed in a kernel ({where})")

    sys.addaudithook(hook)
    return log
