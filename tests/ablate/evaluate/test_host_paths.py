"""Nothing a candidate does is written outside its evaluation: a kernel that tries every route it
has to a path of its choice on the host leaves nothing there; and at the end of the test session
no file on the host belongs to a uid a candidate ran as (a root runner gives each sandbox a uid of
its own, and the evaluation directories it sees are the supervisor's, read-only), in the
checkout, the home folder, the temporary folders or the evaluator's cache: whatever test ran a
candidate, nothing it wrote outlived it.

(A runner that is not root runs sandboxes in a user namespace as its own uid; there the
session check sees nothing to tell apart, and the attacker's targets are what is checked.)"""
import os
import tempfile
import uuid
from pathlib import Path

import pytest

from ablate.evaluate import evaluate

CHECKOUT = Path(__file__).resolve().parents[3]


def _places() -> list[tuple[Path, int]]:
    """(folder, depth) the session check walks."""
    home = Path.home()
    cache = Path(os.environ.get("ABLATE_CACHE_DIR") or home / ".cache" / "ablate")
    return [(CHECKOUT, 99), (home, 2), (cache, 99), (Path(tempfile.gettempdir()), 3), (Path("/dev/shm"), 3),
            (Path("/var/tmp"), 3)]


def _owned_by_a_candidate() -> list[str]:
    from ablate.evaluate import _kit

    uids, found = set(_kit.EVAL_UIDS), []
    for top, depth in _places():
        if not top.is_dir():
            continue
        base = len(top.parts)
        for d, dirs, files in os.walk(top):
            dirs[:] = [x for x in dirs if x not in (".git", ".pyenv", ".venv", "node_modules")]
            if len(Path(d).parts) - base >= depth:
                dirs[:] = []
            for name in dirs + files:
                p = os.path.join(d, name)
                try:
                    if os.lstat(p).st_uid in uids:
                        found.append(p)
                except OSError:
                    continue
    return found


@pytest.fixture(scope="session", autouse=True)
def nothing_left_on_the_host_at_the_end_of_the_session():
    yield
    if os.geteuid() == 0:
        assert _owned_by_a_candidate() == [], "files written by a candidate outlived its evaluation"


ATTACK = '''
import _posixsubprocess, os, torch
TARGETS = {targets!r}
for t in TARGETS:  # straight, through the namespace's root, and through a link of its own
    for path in (t, "/proc/1/root" + t, "/proc/self/root" + t):
        try:
            with open(path, "w") as f:
                f.write("written by a kernel")
        except OSError:
            pass
    try:
        os.symlink(os.path.dirname(t), "/tmp/to-host")
        with open("/tmp/to-host/" + os.path.basename(t), "w") as f:
            f.write("written by a kernel")
    except OSError:
        pass
    finally:
        try:
            os.unlink("/tmp/to-host")
        except OSError:
            pass
# and from a process below the audit hook, left running after the kernel is done
script = "sleep 1; for t in " + " ".join(TARGETS) + "; do echo written > $t; done"
r, w = os.pipe()
args = (["/bin/sh", "-c", script], [b"/bin/sh"], True, (), None, None, -1, -1, -1, -1, -1, -1, r, w, True, True, -1,
        None, None, None)
try:
    _posixsubprocess.fork_exec(*args, None, None)
except TypeError:
    _posixsubprocess.fork_exec(*args, -1, None, False)


def kernel(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).to(x.dtype)
'''


def test_a_kernel_that_writes_to_host_paths_of_its_choice_leaves_nothing_there(tmp_path):
    import time

    mark = uuid.uuid4().hex[:12]
    cache = Path(os.environ.get("ABLATE_CACHE_DIR") or Path.home() / ".cache" / "ablate")
    targets = [CHECKOUT / f"ablate-written-{mark}", CHECKOUT / "operators" / f"written-{mark}.py",
               Path.home() / f"ablate-written-{mark}", Path(tempfile.gettempdir()) / f"ablate-written-{mark}",
               Path("/dev/shm") / f"ablate-written-{mark}", cache / f"written-{mark}", tmp_path / f"written-{mark}"]
    (tmp_path / "kernel.py").write_text(ATTACK.format(targets=[str(t) for t in targets]))
    r = evaluate("rmsnorm", tmp_path / "kernel.py", shapes="smoke", seed=5, draws=1, scan=False, timing=False)
    assert r["sandbox"] == "bwrap", r.get("sandbox_note")
    time.sleep(2)  # the helper, had it outlived the evaluation, would have written by now
    landed = [str(t) for t in targets if t.exists()]
    for t in landed:
        t.unlink()
    assert landed == []
    assert "helper_process" in r["reasons"], r["details"]


def test_the_session_check_finds_a_file_a_candidate_uid_left(monkeypatch, tmp_path):
    from ablate.evaluate import _kit

    if os.geteuid() != 0:
        pytest.skip("only a root runner gives candidates uids of their own")
    left = Path(tempfile.gettempdir()) / f"ablate-left-{uuid.uuid4().hex[:8]}"
    left.write_text("left behind")
    try:
        os.chown(left, 234_567, 234_567)
        monkeypatch.setattr(_kit, "EVAL_UIDS", {234_567})
        assert str(left) in _owned_by_a_candidate()
    finally:
        left.unlink()
