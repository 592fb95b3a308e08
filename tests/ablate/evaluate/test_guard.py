"""The candidate's audit-hook guard, in a process of its own (a hook cannot be removed): what the
submission asks is refused and logged; what a library does on the submission's behalf is not;
code the submission writes elsewhere and imports counts as the submission's."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SUBMISSION = '''
import collections, sys, typing

def attempt(name, fn):
    try:
        fn()
        return name, "allowed"
    except PermissionError:
        return name, "refused"

def run(helper_dir):
    results = dict([
        attempt("namedtuple (a library's own frame use)", lambda: collections.namedtuple("P", "a b")),
        attempt("typing.NamedTuple", lambda: typing.NamedTuple("Q", [("a", int)])),
        attempt("import json.decoder", lambda: __import__("json.decoder")),
        attempt("sys._getframe", lambda: sys._getframe(0)),
        attempt("traceback frame", lambda: (_ for _ in ()).throw(ValueError) if False else _tb_frame()),
        attempt("gc.get_objects", lambda: __import__("gc").get_objects()),
        attempt("exec", lambda: exec("1")),
        attempt("__code__ swap", lambda: setattr(run, "__code__", attempt.__code__)),
        attempt("os.fork", lambda: __import__("os").fork()),
        attempt("ctypes", lambda: __import__("ctypes").CDLL(None)),
        attempt("/proc/self/mem", lambda: open("/proc/self/mem", "rb")),
        attempt("inspect.stack (a proxy)", lambda: __import__("inspect").stack()),
    ])
    sys.path.insert(0, helper_dir)  # code it wrote where it may write, then imported
    import helper
    results["getframe from a written file"] = attempt("x", helper.grab)[1]
    return results

def _tb_frame():
    try:
        raise ValueError
    except ValueError as e:
        return e.__traceback__.tb_frame
'''

DRIVER = '''
import importlib.util, json, sys
sys.path.insert(0, {root!r})
from ablate.evaluate import _guard
log = _guard.install({sub!r}, {kit!r})
spec = importlib.util.spec_from_file_location("kernel", {sub!r} + "/kernel.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
results = mod.run({helper!r})
print(json.dumps({{"results": results, "log": [list(x) for x in log]}}))
'''


def test_refused_when_the_submission_asks_allowed_when_a_library_does(tmp_path):
    sub, helper, kit = tmp_path / "submission", tmp_path / "tmp", tmp_path / "kit"
    for d in (sub, helper, kit):
        d.mkdir()
    (sub / "kernel.py").write_text(SUBMISSION)
    (helper / "helper.py").write_text("import sys\ndef grab():\n    return sys._getframe(0)\n")
    code = DRIVER.format(root=str(ROOT), sub=str(sub), kit=str(kit), helper=str(helper))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    r = got["results"]
    for name in ("namedtuple (a library's own frame use)", "typing.NamedTuple", "import json.decoder"):
        assert r[name] == "allowed", name
    for name in ("sys._getframe", "traceback frame", "gc.get_objects", "exec", "__code__ swap", "os.fork",
                 "ctypes", "/proc/self/mem", "inspect.stack (a proxy)", "getframe from a written file"):
        assert r[name] == "refused", name
    events = {e for e, _ in got["log"]}
    assert {"sys._getframe", "gc.get_objects", "os.fork", "compile"} <= events  # exec("1") compiles first
    assert all(where.startswith(("kernel.py:", "helper.py:", "/proc")) for _, where in got["log"])


LIBRARY_STARTS = '''
import subprocess

def start(path):
    """A library asking for `nvcc --version` (torch.compile does, on a GPU) with PATH=path."""
    try:
        subprocess.run(["nvcc", "--version"], env={"PATH": path}, stdout=subprocess.DEVNULL)
        return "ran"
    except FileNotFoundError:
        return "not found"
    except PermissionError:
        return "refused"
'''

STARTS_DRIVER = '''
import json, sys
sys.path.insert(0, {root!r})
from ablate.evaluate import _guard
log = _guard.install({sub!r}, {kit!r})
sys.path.insert(0, {kit!r})
import library_starts
results = {{name: library_starts.start(path) for name, path in {paths!r}.items()}}
print(json.dumps({{"results": results, "log": [list(x) for x in log]}}))
'''


def test_a_build_tool_no_path_entry_holds_is_not_found_and_one_in_a_writable_place_is_refused(tmp_path):
    """torch.compile on a GPU asks for `nvcc --version` and takes "not found" in its stride: a
    build tool that is nowhere on PATH fails as the system would fail it, before anything runs, and
    is no mark against the kernel; the same name in a place the kernel could write is refused."""
    sub, kit, planted, empty = tmp_path / "submission", tmp_path / "kit", tmp_path / "planted", tmp_path / "empty"
    for d in (sub, kit, planted, empty):
        d.mkdir()
    (kit / "library_starts.py").write_text(LIBRARY_STARTS)
    marker = tmp_path / "it-ran"
    (planted / "nvcc").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (planted / "nvcc").chmod(0o755)
    paths = {"nowhere": f"{empty}:{tmp_path / 'missing'}", "planted": f"{empty}:{planted}"}
    code = STARTS_DRIVER.format(root=str(ROOT), sub=str(sub), kit=str(kit), paths=paths)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["results"] == {"nowhere": "not found", "planted": "refused"}, got
    assert [e for e, _ in got["log"]] == ["subprocess.Popen"] and "nvcc" in got["log"][0][1], got["log"]
    assert not marker.exists()
