"""The routes past the candidate's guard that an attacker found (issue 35), each as the kernel that
used it, judged on CPU through the public API with the static scan off, so what stops it is the
run-time guard (_guard) or the integrity snapshot (_integrity): every one rejected, for its reason.

A kernel that tries several spellings of one route does so at import and raises what each
attempt gave (the judge shows import errors in `details`), so the test sees every spelling fail,
not only the first."""
import json
import os
import subprocess
import sys
import textwrap
import time
import types

import pytest

from ablate.evaluate import evaluate

# the sleepers below end in this test process's id (fixed width: no other run's marker contains it),
# so a run of the suite beside this one, whose sleeper is alive at that moment, is not taken for this one's
RUN = f"{os.getpid():08d}"

HONEST = '''
def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
'''

# -- what reaches the evaluator without an audit event: class walks, globals, builtins ----------
CLASSES = '''
import torch

def kit_classes():
    """Every class of the evaluator's own modules, found from object by __subclasses__ (no event)."""
    out, seen, todo = [], set(), [().__class__.__mro__[-1]]
    while todo:
        c = todo.pop()
        try:
            subs = type.__subclasses__(c)
        except TypeError:
            continue
        for s in subs:
            if id(s) not in seen:
                seen.add(id(s))
                todo.append(s)
                if str(type.__dict__["__module__"].__get__(s)).startswith(("ablate.", "operators.")):
                    out.append(s)
    return out

KIT = kit_classes()
assert KIT, "no class of the evaluator found"

def wrap(f):
    return lambda *a, **k: f(*a, **k)
'''

GLOBALS_ROUTE = CLASSES + '''
# a method's __globals__ is its module's dict: rebind a function there (the guard's tool_name,
# which the hook no longer calls: the kernel's own behaviour stays honest)
modules = {}
for cls in KIT:
    for v in vars(cls).values():
        g = getattr(getattr(v, "__func__", v), "__globals__", None)
        if isinstance(g, dict):
            modules[g["__name__"]] = g
            for m in list(g.values()):
                if type(m).__name__ == "module" and m.__name__.startswith("ablate."):
                    modules[m.__name__] = vars(m)
g = modules["ablate.evaluate._guard"]
g["tool_name"] = wrap(g["tool_name"])
''' + HONEST

CLASS_ATTRIBUTE_ROUTE = CLASSES + '''
# a class's attribute written without an event (type.__setattr__ raises none in Python 3.11)
snapshot = next(c for c in KIT if c.__name__ == "Snapshot")
snapshot.__init__ = wrap(snapshot.__init__)
''' + HONEST

BUILTINS_ROUTE = CLASSES + '''
# a method's __builtins__ is the kit's private copy of the builtins
for cls in KIT:
    f = next((getattr(v, "__func__", v) for v in vars(cls).values() if hasattr(getattr(v, "__func__", v), "__builtins__")), None)
    if f is not None:
        f.__builtins__["sorted"] = wrap(f.__builtins__["sorted"])
        break
''' + HONEST


@pytest.mark.parametrize("route,name", [
    (GLOBALS_ROUTE, "ablate.evaluate._guard.tool_name"),
    (CLASS_ATTRIBUTE_ROUTE, "ablate.evaluate._integrity.Snapshot.__init__"),
    (BUILTINS_ROUTE, "the kit's builtins.sorted"),
], ids=["function-globals", "class-attribute", "kit-builtins"])
def test_a_write_reached_through_the_class_hierarchy_is_driver_tampered(tmp_path, route, name):
    r = _judge(tmp_path, route)
    assert r["verdict"] == "rejected" and "driver_tampered" in r["reasons"], r["details"]
    assert name in r["details"]["driver_tampered"], r["details"]


def test_a_closure_cell_of_the_evaluator_is_covered_by_the_snapshot(monkeypatch):
    """A cell's contents are written without an event too; no module of the kit holds a closure
    today, so a stand-in module under the kit's name shows the snapshot reads them."""
    from ablate.evaluate._integrity import Snapshot

    mod = types.ModuleType("ablate._closure_probe")
    exec("def make():\n    clock = object()\n    return lambda: clock\nread = make()\n", mod.__dict__)
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    snap = Snapshot()
    assert snap.tampered()["driver_tampered"] == []
    mod.read.__closure__[0].cell_contents = object()
    assert snap.tampered()["driver_tampered"] == ["ablate._closure_probe.read (closure cell 0)"]


def test_the_snapshot_reads_with_what_it_bound_not_what_a_kernel_rebinds(monkeypatch):
    """Blinding the check: make inspect.getattr_static and importlib.import_module (what the
    old resolver called) hand back the originals; the snapshot's reader never calls them."""
    import importlib
    import inspect

    import torch

    from ablate.evaluate._integrity import Snapshot

    snap, original = Snapshot(), torch.equal
    monkeypatch.setattr(torch, "equal", lambda a, b: True)
    monkeypatch.setattr(inspect, "getattr_static", lambda obj, name, *d: original if name == "equal" else getattr(obj, name))

    def import_module(name, *a):
        if name not in sys.modules:
            raise ImportError(name)
        return sys.modules[name]

    monkeypatch.setattr(importlib, "import_module", import_module)
    assert "torch.equal" in snap.tampered()["driver_tampered"]


# -- frames: a signal handler, a library helper that walks frames for its caller -------------------
SIGNALS = '''
import _signal, functools, json, signal, torch
seen = {}
def attempt(name, fn):
    try:
        fn()
        seen[name] = "installed"
    except PermissionError:
        seen[name] = "refused"
frames = []
handler = lambda s, f: frames.append(f)
attempt("signal.signal", lambda: signal.signal(signal.SIGALRM, handler))
attempt("_signal.signal", lambda: _signal.signal(signal.SIGALRM, handler))
attempt("signal.signal.__wrapped__", lambda: getattr(signal.signal, "__wrapped__", signal.signal)(signal.SIGALRM, handler))
attempt("functools.partial", lambda: functools.partial(signal.signal, signal.SIGALRM, handler)())
raise RuntimeError("OUTCOMES " + json.dumps(seen) + " END")
''' + HONEST


def test_a_signal_handler_is_refused_to_the_submission_however_it_is_installed(tmp_path):
    r = _judge(tmp_path, SIGNALS)
    outcomes = _outcomes(r)
    assert outcomes and set(outcomes.values()) == {"refused"}, outcomes
    assert "forbidden_code" in r["reasons"] and "signal.signal" in r["details"]["forbidden_code"]


def test_a_handler_a_library_installs_gets_no_frame(tmp_path):
    """The guard in a process of its own, a library's file installing the kernel's handler: the
    handler runs, without the interrupted frame."""
    lib, sub, kit = tmp_path / "lib", tmp_path / "submission", tmp_path / "kit"
    for d in (lib, sub, kit):
        d.mkdir()
    (lib / "installer.py").write_text("import signal\ndef install(h):\n    signal.signal(signal.SIGUSR1, h)\n")
    code = textwrap.dedent(f'''
        import json, os, signal, sys, site
        sys.path.insert(0, {str(_root())!r})
        site.getsitepackages = lambda: [{str(lib)!r}]  # the library's folder counts as installed packages
        from ablate.evaluate import _guard
        log = _guard.install({str(sub)!r}, {str(kit)!r})
        sys.path.insert(0, {str(lib)!r})
        import installer
        got = []
        installer.install(lambda s, f: got.append(f))
        signal.raise_signal(signal.SIGUSR1)
        print(json.dumps({{"frames": [repr(f) for f in got], "log": log}}))
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"frames": ["None"], "log": []}


def test_an_audit_hook_is_never_added_and_only_the_kernels_own_try_is_held_against_it(tmp_path):
    """A hook of another's would see every event the guard does. Refused whoever asks (Python
    then returns without adding it), so a library's try costs the kernel nothing (filelock adds
    one when imported on Python 3.12, and torch.compile imports filelock); the kernel's own try is
    logged (forbidden_code)."""
    lib, sub, kit = tmp_path / "lib", tmp_path / "submission", tmp_path / "kit"
    for d in (lib, sub, kit):
        d.mkdir()
    hooking = "import sys\n\nseen = []\nsys.addaudithook(lambda event, args: seen.append(event))\n"
    (lib / "hooker.py").write_text(hooking)
    (sub / "kernel.py").write_text(hooking)
    code = textwrap.dedent(f'''
        import json, sys, site
        sys.path.insert(0, {str(_root())!r})
        site.getsitepackages = lambda: [{str(lib)!r}]  # the library's folder counts as installed packages
        from ablate.evaluate import _guard
        log = _guard.install({str(sub)!r}, {str(kit)!r})
        sys.path[:0] = [{str(lib)!r}, {str(sub)!r}]
        import hooker
        library_log = list(log)
        import kernel
        sys.audit("after.the.imports")
        print(json.dumps({{"seen": hooker.seen + kernel.seen, "library_log": library_log, "log": log}}))
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["seen"] == [] and got["library_log"] == []
    assert got["log"] == [["sys.addaudithook", "kernel.py:4"]]


JIT_INTERNAL = '''
import torch
leaked = []
def kernel(x, weight):
    try:  # the driver's locals, through a frame torch walks to for its caller
        leaked.append(torch._jit_internal.createResolutionCallbackFromFrame(1)("self"))
    except PermissionError:
        pass
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
'''


def test_a_library_helper_that_walks_frames_for_its_caller_is_the_callers_request(tmp_path):
    r = _judge(tmp_path, JIT_INTERNAL)
    assert r["verdict"] == "rejected" and "forbidden_code" in r["reasons"], r["details"]
    assert "sys._getframe" in r["details"]["forbidden_code"]


# -- the object graph through a library's hands ----------------------------------------------------
MOCK_GC = '''
import gc, torch, unittest.mock
def kernel(x, weight):
    try:
        unittest.mock.Mock(side_effect=gc.get_referrers)(x)
    except PermissionError:
        pass
''' + HONEST.split("def kernel(x, weight):", 1)[1]

FINALIZER_GC = '''
import gc, torch, weakref
store = []
def kernel(x, weight):
    xf = x.float()
    out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
    # run from C when the driver drops the output: no frame of this file asks
    weakref.finalize(out, store.extend, map(gc.get_objects, [0]))
    return out
'''


@pytest.mark.parametrize("route", [MOCK_GC, FINALIZER_GC], ids=["unittest.mock", "finalizer"])
def test_the_garbage_collector_is_refused_whoever_calls_it(tmp_path, route):
    r = _judge(tmp_path, route, timing=True)
    assert r["verdict"] == "rejected" and "forbidden_code" in r["reasons"], r["details"]
    assert "gc.get_" in r["details"]["forbidden_code"]


# -- the process's own memory, however the path is spelled -----------------------------------------
PROC_MEM = '''
import json, os, pathlib, threading, torch
seen = {}
def attempt(name, fn):
    try:
        fd = fn()
        seen[name] = "opened"
        os.close(fd) if isinstance(fd, int) else fd.close()
    except PermissionError as e:
        seen[name] = "refused" if "ablate" in str(e) else f"denied: {e}"
    except OSError as e:
        seen[name] = f"{type(e).__name__}: {e}"
proc = os.open("/proc/self", os.O_RDONLY | os.O_DIRECTORY)
for spelling in ["//proc/self/mem", "/proc/./self/mem", "/proc/self/../self/mem", "/proc/thread-self/mem",
                 f"/proc/self/task/{threading.get_native_id()}/mem", f"/proc/{os.getpid()}/mem",
                 f"/dev/fd/{proc}/mem", f"/proc/self/fd/{proc}/mem"]:
    attempt(spelling, lambda: os.open(spelling, os.O_RDWR))
attempt("bytes", lambda: open(b"/proc/self/mem", "rb"))
attempt("pathlib", lambda: pathlib.Path("/proc/self/mem").open("rb"))
attempt("dir_fd", lambda: os.open("mem", os.O_RDWR, dir_fd=proc))
attempt("link to the file", lambda: os.symlink("/proc/self/mem", "/tmp/m"))
os.symlink("/proc/self", "/tmp/p")
attempt("through a link to the folder", lambda: open("/tmp/p/mem", "rb"))
os.chdir("/proc/self/task")
attempt("relative", lambda: open(f"{threading.get_native_id()}/mem", "rb"))
raise RuntimeError("OUTCOMES " + json.dumps(seen) + " END")
''' + HONEST


def test_a_process_s_own_memory_is_refused_however_the_path_is_spelled(tmp_path):
    r = _judge(tmp_path, PROC_MEM)
    outcomes = _outcomes(r)
    assert len(outcomes) == 14 and set(outcomes.values()) == {"refused"}, outcomes
    assert "forbidden_code" in r["reasons"]


# -- processes: decided by what is started, not by who asks ----------------------------------------
STARTED_BY_A_FINALIZER = '''
import os, subprocess, torch, weakref
def kernel(x, weight):
    xf = x.float()
    out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
    weakref.finalize(out, {call})  # runs when the driver drops the output
    return out
'''
SHELL = f'subprocess.Popen, ["/bin/sh", "-c", "sleep 600.4711{RUN}"]'
SYSTEM = f'os.system, "sleep 600.4712{RUN}"'
PATH_TRICK = f'''
import os, stat
os.makedirs("/tmp/bin", exist_ok=True)
with open("/tmp/bin/gcc", "w") as f:
    f.write("#!/bin/sh\\nexec sleep 600.4713{RUN}\\n")
os.chmod("/tmp/bin/gcc", 0o755)
os.environ["PATH"] = "/tmp/bin:" + os.environ["PATH"]
'''


@pytest.mark.parametrize("call,marker", [(SHELL, f"600.4711{RUN}"), (SYSTEM, f"600.4712{RUN}"),
                                         ('subprocess.Popen, ["gcc", "--version"]', f"600.4713{RUN}")],
                         ids=["a-shell", "os.system", "a-gcc-of-its-own-on-PATH"])
def test_a_library_frame_may_start_only_a_build_tool(tmp_path, call, marker):
    source = (PATH_TRICK if "gcc" in call else "") + STARTED_BY_A_FINALIZER.format(call=call)
    r = _judge(tmp_path, source, timing=True)
    assert r["verdict"] == "rejected" and "forbidden_code" in r["reasons"], r["details"]
    assert ("os.system" if "system" in call else "subprocess.Popen") in r["details"]["forbidden_code"]
    assert not _running(marker)


GUARD_REWRITTEN = GLOBALS_ROUTE.split(HONEST)[0].replace('''g["tool_name"] = wrap(g["tool_name"])''', '''
class Everything:  # every program looks like gcc to whoever asks this module's names
    def sub(self, repl, text):
        return "gcc"
g["_TRIPLET"] = g["_VERSION"] = Everything()
g["tool_name"] = lambda path: "gcc"
g["BUILD_TOOLS"] = frozenset({"gcc", "sh", "sleep"})
''') + STARTED_BY_A_FINALIZER.format(call=f'subprocess.Popen, ["/bin/sh", "-c", "sleep 600.4714{RUN}"]').replace(
    "import os, subprocess, torch, weakref", "import os, subprocess, weakref")


def test_the_guard_decides_with_what_it_bound_not_its_module_s_names(tmp_path):
    """The guard's own module is reachable (a method's __globals__): rewriting the names it would
    have looked up changes nothing it decides, and the rewrite itself is reported."""
    r = _judge(tmp_path, GUARD_REWRITTEN, timing=True)
    assert r["verdict"] == "rejected" and {"forbidden_code", "driver_tampered"} <= set(r["reasons"]), r["details"]
    assert "subprocess.Popen" in r["details"]["forbidden_code"]
    assert "ablate.evaluate._guard._TRIPLET" in r["details"]["driver_tampered"]
    assert not _running(f"600.4714{RUN}")


@pytest.mark.parametrize("call", ['subprocess.run, ["uname", "-s"], stdout=-3',
                                  # torch.compile's `nvcc --version` on a GPU with no nvcc on PATH
                                  'subprocess.run, ["nvcc", "--version"], env={"PATH": "/nonexistent"}, stdout=-3'],
                         ids=["found", "nowhere-on-PATH"])
def test_a_build_tool_a_library_starts_for_the_kernel_is_allowed(tmp_path, call):
    r = _judge(tmp_path, STARTED_BY_A_FINALIZER.format(call=call), timing=True)
    assert r["verdict"] == "accepted", r["details"]


def test_a_kernel_that_signals_the_process_that_started_it_is_refused(kernels, tmp_path):
    r = _judge(tmp_path, (kernels / "kill_parent.py").read_text())
    assert r["verdict"] == "rejected" and "forbidden_code" in r["reasons"], r["details"]
    assert "os.kill" in r["details"]["forbidden_code"]


# -- helpers ---------------------------------------------------------------------------------------
def _root():
    from pathlib import Path

    return Path(__file__).resolve().parents[3]


def _judge(tmp_path, source: str, timing: bool = False) -> dict:
    path = tmp_path / "kernel.py"
    path.write_text(source)
    return evaluate("rmsnorm", path, shapes="smoke", seed=7, draws=1, scan=False, timing=timing)


def _outcomes(r: dict) -> dict:
    text = r["details"].get("import_error", "")
    if "OUTCOMES {" not in text:
        return {}
    start = text.rindex("OUTCOMES {") + len("OUTCOMES ")
    return json.loads(text[start:text.index(" END", start)])


def _running(marker: str) -> bool:
    time.sleep(0.2)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("source", [GLOBALS_ROUTE, CLASS_ATTRIBUTE_ROUTE, BUILTINS_ROUTE, SIGNALS, JIT_INTERNAL, MOCK_GC,
                                    FINALIZER_GC, PROC_MEM, STARTED_BY_A_FINALIZER.format(call=SHELL)],
                         ids=["globals", "class-attribute", "builtins", "signals", "jit_internal", "mock", "finalizer",
                              "proc-mem", "finalizer-shell"])
def test_the_static_scan_names_each_route_before_anything_runs(source):
    from ablate.evaluate import _static

    tree, err = _static.parse(source)
    assert tree is not None, err
    assert _static.forbidden(tree), source


# -- torch.compile's load check, imitated: allowed to a library, never past its grace -------------
PROBE = (f'subprocess.Popen, [sys.executable, "-c", "from ctypes import cdll\\nimport time; time.sleep(600.4716{RUN})\\n'
         'cdll.LoadLibrary(chr(120))"]')
STAYING_PROBE = '''
import sys
FINALIZERS, SLEPT = [], []
''' + STARTED_BY_A_FINALIZER.format(call=PROBE).replace("    weakref.finalize(", "    FINALIZERS.append(weakref.finalize(").replace(
    "  # runs when", ")  # runs when").replace("    return out", '''    if not SLEPT and any(not f.alive for f in FINALIZERS):  # a probe-shaped Python started: let it stay
        import time
        SLEPT.append(1)
        time.sleep(14)
    return out''')


def test_a_python_shaped_like_the_load_check_that_stays_is_a_helper(tmp_path):
    """A library frame may start a Python whose command only dlopens a file (what torch.compile
    runs); one that stays past the watch's grace is a helper_process, and it does not outlive the
    evaluation. Started by the submission itself, it is refused at once."""
    r = _judge(tmp_path, STAYING_PROBE, timing=True)
    assert r["verdict"] == "rejected" and "helper_process" in r["reasons"], r["details"]
    assert not _running(f"600.4716{RUN}")
    direct = "import subprocess, sys\nsubprocess.Popen(" + PROBE.split(", ", 1)[1] + ")\n" + HONEST.replace(
        "def kernel", "import torch\n\ndef kernel")
    r = _judge(tmp_path, direct)
    assert r["verdict"] == "rejected" and "forbidden_code" in r["reasons"], r["details"]
    assert not _running(f"600.4716{RUN}")


# -- the operator watch's redispatch check, its real entry read through a library ----------------
WATCH_DEFAULTS = '''
import pydoc, torch
def kernel(x, weight):
    entry = ENTRY
    try:  # pydoc reads the defaults for the signature it renders: a library asks, on the kernel's behalf
        pydoc.render_doc(entry)
    except PermissionError:
        pass
''' + HONEST.split("def kernel(x, weight):", 1)[1]


@pytest.mark.parametrize("entry", [
    "type(torch.ops.aten.mul.Tensor._handle).redispatch_boxed",  # the checked redispatch
    "torch.ops.aten.mul.Tensor._op_dk.func",  # the checked kernel for a dispatch key, behind each overload's partial
    "torch._C._get_operation_overload",  # what makes each later overload's partial
], ids=["redispatch", "for_key", "get_operation_overload"])
def test_the_defaults_holding_the_watchs_real_entries_are_refused_whoever_reads_them(tmp_path, entry):
    """The real entries and the watch's containers are keyword defaults of the checked entries
    (_watch._checked_entry, _checked_for_key): reading them is refused to a library too, since
    torch.compile inlining a check would read them and call the entry itself."""
    r = _judge(tmp_path, WATCH_DEFAULTS.replace("ENTRY", entry))
    assert r["verdict"] == "rejected" and "forbidden_code" in r["reasons"], r["details"]
    assert "object.__getattr__ __code__ (whoever asks: a function holding the operator watch's switch)" \
        in r["details"]["forbidden_code"]  # pydoc reads its code first, then its defaults
