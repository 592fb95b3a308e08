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
