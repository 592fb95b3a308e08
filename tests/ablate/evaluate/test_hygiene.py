"""Every evaluation starts clean and leaves nothing behind (issue 35, point 3): a sandbox of its
own per evaluation on CPU as on GPU (a fresh interpreter, started ahead as a spare and used
once), a private /tmp, no process outliving it (its PID namespace is killed whole), root-side
writes that follow no link into directories the sandbox never owned, files in its tmpfs counted
as memory, output capped before any disk. Each attack is a kernel run through the public API on
CPU, with the static scan off where the scan would have caught it first."""
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ablate.evaluate import _kit, _servers, evaluate

HONEST = '''
def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
'''

# What a candidate sees of its evaluation, and what it leaves for the next one to find.
LOOK = '''
import json, os, stat, torch
MARK = {mark!r}

def listing(top):
    out = []
    for d, dirs, files in os.walk(top):
        out += [os.path.join(d, f) for f in files]
    return sorted(out)

def write(path):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(MARK)
        return "written"
    except OSError as e:
        return type(e).__name__

seen = {{"tmp": listing("/tmp"), "home": os.environ["HOME"], "ns": os.readlink("/proc/self/ns/pid"),
        "pids": sorted(p for p in os.listdir("/proc") if p.isdigit()),
        "found": [p for p in listing("/tmp") + listing("/eval") if "mark" in p],
        "stdout": stat.S_ISFIFO(os.fstat(1).st_mode)}}
seen["writes"] = {{p: write(p) for p in ("/tmp/mark-" + MARK, os.environ["HOME"] + "/mark-" + MARK,
                                        os.environ["TRITON_CACHE_DIR"] + "/mark-" + MARK, "/dev/shm/mark-" + MARK,
                                        os.path.dirname(__file__) + "/mark-" + MARK,
                                        os.path.dirname(os.path.dirname(__file__)) + "/entry/mark-" + MARK,
                                        "/eval/mark-" + MARK)}}
try:
    os.replace(__file__, os.path.dirname(__file__) + "/moved.py")
    seen["replace kernel.py"] = "replaced"
except OSError as e:
    seen["replace kernel.py"] = type(e).__name__
raise RuntimeError("SEEN " + json.dumps(seen) + " END")
''' + HONEST


def _look(tmp_path, mark: str) -> tuple[dict, dict]:
    path = tmp_path / f"look-{mark}.py"
    path.write_text(LOOK.format(mark=mark))
    r = evaluate("rmsnorm", path, shapes="smoke", seed=3, draws=1, scan=False, timing=False)
    text = r["details"].get("import_error", "")
    assert "SEEN {" in text, r["details"]
    start = text.rindex("SEEN {") + 5
    return r, json.loads(text[start:text.index(" END", start)])


def test_each_evaluation_has_a_sandbox_and_a_tmp_of_its_own_and_nothing_of_the_last(tmp_path):
    r1, first = _look(tmp_path, "one")
    r2, second = _look(tmp_path, "two")
    for seen in (first, second):
        assert seen["found"] == [], seen["found"]  # no mark of an earlier evaluation anywhere it can look
        assert all(not p.startswith("/tmp/mark") for p in seen["tmp"])
        assert len(seen["pids"]) <= 4, seen["pids"]  # its own PID namespace: bubblewrap and itself
        assert seen["stdout"] is True  # its output is a pipe the supervisor drains, never a file
        # what it may write lives in its private tmpfs; the evaluation directory is read-only to it
        assert seen["writes"]["/tmp/mark-" + ("one" if seen is first else "two")] == "written"
        assert {k: v for k, v in seen["writes"].items() if k.startswith(("/eval", "/dev/shm"))} and all(
            v != "written" for k, v in seen["writes"].items() if k.startswith(("/eval", "/dev/shm"))), seen["writes"]
        assert seen["replace kernel.py"] != "replaced"
    assert first["ns"] != second["ns"]  # a fresh process tree, not a fork of a shared parent
    assert r1["sandbox"] == r2["sandbox"] == "bwrap"


def test_a_spare_is_fresh_until_used_and_used_once():
    key = ("cpu", os.environ.get("CUDA_VISIBLE_DEVICES"))
    _servers.SPARES.close()
    _servers.SPARES.refill(key, "cpu")
    spare = _servers.SPARES.idle[key]
    taken = _servers.SPARES.take(key, "cpu")
    try:
        assert taken is spare and key not in _servers.SPARES.idle  # handed out, and forgotten
        again = _servers.SPARES.take(key, "cpu")  # the next one is another process, another sandbox
        try:
            assert again is not taken and again.root != taken.root and again.pid != taken.pid
        finally:
            again.close()
    finally:
        taken.close()
    assert not taken.root.exists()


def test_a_spare_takes_tritons_first_compile_for_the_gpu_it_will_run_on(tmp_path, monkeypatch):
    """A GPU spare compiles a kernel of the evaluator's own, so a candidate's first call pays only
    its own kernel's compile, not the compiler's start (no GPU needed to compile for one)."""
    pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget

    from ablate.evaluate import _gpu

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    compiled = _gpu.warm_triton_compiler(GPUTarget("cuda", 90, 32))
    assert compiled.asm["cubin"] and ".target sm_90" in compiled.asm["ptx"]


DAEMONS = '''
import _posixsubprocess, os, torch
# below the audit hook: a shell that leaves a new session, ignores hang-ups and terminations and
# double-forks a sleeper, and a loop that keeps trying to turn any kernel.py it can see into a link
SCRIPT = ("trap '' HUP TERM INT; (setsid sh -c \\"trap '' HUP TERM; exec sleep {mark}\\" &) ; "
          "while :; do for f in /eval/*/submission/kernel.py /tmp/*.py; do ln -sf {target} $f 2>/dev/null; done; "
          "sleep 0.05; done")
r, w = os.pipe()
args = (["/bin/sh", "-c", SCRIPT], [b"/bin/sh"], True, (), None, None, -1, -1, -1, -1, -1, -1, r, w, True, True, -1,
        None, None, None)
try:
    _posixsubprocess.fork_exec(*args, None, None)  # Python 3.11
except TypeError:
    _posixsubprocess.fork_exec(*args, -1, None, False)  # 3.12 and later
''' + HONEST


def test_no_process_outlives_its_evaluation_however_it_left(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("untouched")
    mark = f"600.9191{os.getpid():08d}"  # this process's own: a run of the suite beside this one has its own
    (tmp_path / "daemons.py").write_text(DAEMONS.format(mark=mark, target=target))
    r = evaluate("rmsnorm", tmp_path / "daemons.py", shapes="smoke", seed=3, draws=1, scan=False, timing=False)
    assert "helper_process" in r["reasons"], r["details"]  # a shell and a sleeper are no build tools
    assert not _running(mark) and not _running("ln -sf")
    honest = tmp_path / "honest.py"
    honest.write_text("import torch\n" + HONEST)
    assert evaluate("rmsnorm", honest, shapes="smoke", seed=4, draws=1)["verdict"] == "accepted"
    assert target.read_text() == "untouched" and not honest.is_symlink()


def test_a_kernel_scribbling_over_all_the_memory_it_shares_spoils_only_its_own_verdict(tmp_path):
    """kernels/shared_scribble.py writes 0xff over every shared mapping it can open (slots, pool,
    channel) in every call: rejected, and an honest kernel judged after it in this process gets the
    verdict and the errors it got before it, to the bit."""
    kernels = Path(__file__).parent / "kernels"
    honest = tmp_path / "honest.py"
    honest.write_text("import torch\n" + HONEST)
    before = evaluate("rmsnorm", honest, shapes="smoke", seed=4, draws=1)
    r = evaluate("rmsnorm", kernels / "shared_scribble.py", shapes="smoke", seed=3, draws=1, scan=False)
    assert r["verdict"] == "rejected" and "input_mutated" in r["reasons"], r["details"]  # it reached the slots
    after = evaluate("rmsnorm", honest, shapes="smoke", seed=4, draws=1)
    assert before["verdict"] == after["verdict"] == "accepted", after["details"]
    assert [s["max_abs_error"] for s in after["shapes"]] == [s["max_abs_error"] for s in before["shapes"]]


def test_the_root_side_never_writes_through_a_link_nor_into_a_directory_not_its_own(tmp_path):
    root = tmp_path / "root"
    (root / "e" / "submission").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched")
    (root / "e" / "submission" / "kernel.py").symlink_to(outside)
    with pytest.raises(FileExistsError):  # created new, never opened through what is there
        _kit.write_new(root, ("e", "submission", "kernel.py"), b"x")
    (root / "e" / "linked").symlink_to(root / "e" / "submission")
    with pytest.raises(OSError):  # a directory on the way that is a link
        _kit.write_new(root, ("e", "linked", "fresh.py"), b"x")
    (root / "e" / "open").mkdir()
    (root / "e" / "open").chmod(0o777)
    with pytest.raises(_kit.EvaluatorFailure, match="not ours alone"):
        _kit.write_new(root, ("e", "open", "fresh.py"), b"x")
    assert outside.read_text() == "untouched" and not (root / "e" / "open" / "fresh.py").exists()
    _kit.write_new(root, ("e", "submission", "new.py"), b"ok")
    assert (root / "e" / "submission" / "new.py").read_bytes() == b"ok"


FILL = '''
import os, torch
CHUNK = b"\\0" * (64 << 20)
def fill(path):
    try:
        with open(path, "wb") as f:
            for _ in range(64):  # up to 4 GiB
                f.write(CHUNK)
                f.flush()
    except OSError:
        pass
fill("/dev/shm/fill")  # not writable inside
fill("/tmp/fill")  # its private tmpfs: memory no process's RSS shows
''' + HONEST


def test_files_written_to_its_tmpfs_count_against_the_memory_limit(tmp_path):
    (tmp_path / "fill.py").write_text(FILL)
    r = evaluate("rmsnorm", tmp_path / "fill.py", shapes="smoke", seed=3, draws=1, scan=False, timing=False,
                 memory_limit_gb=1.0)
    assert r["reasons"] == ["oom"], r["details"]


LOUD = '''
import os
chunk = b"x" * (1 << 20)
for _ in range(1024):
    os.write(1, chunk)
os.write(2, b"THE END OF WHAT IT PRINTED")
os._exit(3)
''' + HONEST


def test_what_a_candidate_prints_never_reaches_a_disk(tmp_path):
    """1 GiB printed: the supervisor drains the pipe and keeps its tail; no disk sees it (the
    free space of the host's temporary folder is watched while it runs)."""
    import threading

    (tmp_path / "loud.py").write_text(LOUD)
    free, lowest, done = _free_bytes(), [_free_bytes()], threading.Event()

    def watch():
        while not done.wait(0.05):
            lowest[0] = min(lowest[0], _free_bytes())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = evaluate("rmsnorm", tmp_path / "loud.py", shapes="smoke", seed=3, draws=1, scan=False, timing=False)
    finally:
        done.set()
        watcher.join()
    assert r["reasons"] == ["crash"] and "THE END OF WHAT IT PRINTED" in r["details"]["crash"], r["details"]
    assert lowest[0] > free - (512 << 20), (free - lowest[0]) >> 20  # a GiB written to a file would show


def test_the_output_tail_keeps_the_end_and_counts_the_rest():
    r, w = os.pipe()
    tail = _servers.OutputTail(r)
    for i in range(160):
        os.write(w, bytes([65 + i % 26]) * 65536)
    os.write(w, b"LAST WORDS")
    os.close(w)
    tail.close(10)
    assert tail.total == 160 * 65536 + 10
    assert tail.text(10) == "LAST WORDS" and len(tail.buf) <= 2 * _servers.OUTPUT_KEEP


def test_a_build_tool_is_no_helper_and_anything_else_is():
    assert _servers.tool_name("/usr/bin/x86_64-linux-gnu-gcc-12") == "gcc"
    assert _servers.tool_name("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus") == "cc1plus"
    assert _servers.tool_name("/usr/local/cuda/bin/ptxas") == "ptxas"
    for other in ("/usr/bin/sleep", "/bin/sh", "/usr/bin/python3.11", "/usr/bin/curl"):
        assert _servers.tool_name(other) not in _servers.BUILD_TOOLS


# -- helpers ---------------------------------------------------------------------------------------
def _running(marker: str) -> bool:
    time.sleep(0.3)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read().replace(b"\0", b" "):
                    return True
        except OSError:
            continue
    return False


def _free_bytes() -> int:
    import tempfile

    st = os.statvfs(tempfile.gettempdir())
    return st.f_bavail * st.f_frsize
