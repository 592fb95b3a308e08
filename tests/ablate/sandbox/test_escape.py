"""Agent code tries to get out; each attempt fails, the runner (this pytest) survives, and the
tool result shows what happened. Modes: ``root`` (the runner is root; commands run as a uid of
their own) and ``userns`` (an unprivileged user namespace), where this machine runs both."""
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ablate.sandbox import Limits, Workspace, _bwrap, core_tools

SECRET = "SECRET-7f3a"
CHECKOUT = Path(__file__).resolve().parents[3]  # the checkout under test (whatever its path)
MODES = ["root", "userns"]


def bash(ws, command, **kw):
    return core_tools(ws)["bash"].run({"command": command, **kw})


@pytest.fixture
def listener():
    """A TCP server on the runner's loopback that records whether anyone connected."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    hits, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                hits.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1], hits
    stop.set()
    t.join()
    srv.close()


@pytest.mark.parametrize("mode", MODES)
def test_network_connect_fails(make_ws, listener, mode):
    port, hits = listener
    socket.create_connection(("127.0.0.1", port), timeout=2).close()  # reachable from the runner
    for _ in range(50):
        if hits:
            break
        time.sleep(0.05)
    assert len(hits) == 1
    ws = make_ws(mode)
    r = bash(ws, f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')\"")
    assert r.is_error and "CONNECTED" not in r.content
    assert "Connection refused" in r.content or "unreachable" in r.content
    r = bash(ws, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED")
    assert r.is_error and "CONNECTED" not in r.content
    assert len(hits) == 1  # nothing from inside arrived


def test_network_other_interfaces_unreachable(make_ws):
    r = bash(make_ws(), "python -c \"import socket; print(socket.if_nameindex())\"")
    assert "eth" not in r.content and "ens" not in r.content  # only an isolated loopback
    assert "lo" in r.content


@pytest.mark.parametrize("mode", MODES)
def test_dns_fails(make_ws, mode):
    r = bash(make_ws(mode), "python -c \"import socket; print(socket.getaddrinfo('pypi.org', 443))\"")
    assert r.is_error and "gaierror" in r.content


@pytest.mark.parametrize("mode", MODES)
def test_reading_the_project_and_other_trials_fails(project, make_ws, unconfined, mode):
    targets = [project / "operators/rmsnorm/hidden_shapes.py", project / "runs/other-trial/record.json",
               project / "harnesses/knowledge/tiling.md", project / "harnesses/scripted/templates/rmsnorm.py"]
    attempts = [f"cat {' '.join(map(str, targets))}",
                "cat ../../other-trial/record.json ../../../operators/rmsnorm/hidden_shapes.py",
                "ls -a / /runs /workspace/..; grep -rs SECRET / --exclude-dir={usr,sys,proc,dev,root,etc}",
                f"python -c \"print([open(p).read() for p in {[str(t) for t in targets]!r}])\""]
    # The same commands unconfined do read the files: the attempts aim at the right places.
    open_ws = Workspace.create(project / "runs/this-trial/workspace", {}, Limits(confinement="none"))
    assert SECRET in bash(open_ws, attempts[0]).content and SECRET in bash(open_ws, attempts[1]).content
    ws = make_ws(mode)
    for cmd in attempts:
        r = bash(ws, cmd, timeout_s=20)
        assert SECRET not in r.content, cmd
    assert "No such file or directory" in bash(ws, attempts[0]).content


@pytest.mark.parametrize("mode", MODES)
def test_reading_the_real_checkout_fails(make_ws, mode):
    hidden = CHECKOUT / "operators" / "__init__.py"
    assert hidden.is_file()
    ws = make_ws(mode)
    r = bash(ws, f"cat {hidden}")
    assert r.is_error and "No such file or directory" in r.content
    r = bash(ws, f"python -c \"print(open('{hidden}').read())\"")
    assert r.is_error and "FileNotFoundError" in r.content
    # Nothing of the checkout shows; at most the directories leading to an interpreter that lives
    # inside it (a .venv), which the sandbox mounts.
    listed = ws.run(f"ls -A {CHECKOUT} 2>&1").output.split()
    venvs = {p.relative_to(CHECKOUT).parts[0] for p in _bwrap.python_paths() if CHECKOUT in p.parents}
    assert set(listed) <= venvs if venvs else "No such file or directory" in " ".join(listed), listed
    r = bash(ws, "python -c 'import operators.rmsnorm'")  # the editable install's .pth leads nowhere
    assert r.is_error and "ModuleNotFoundError" in r.content
    r = bash(ws, "python -c 'from ablate.harnesses import scripted'")
    assert r.is_error and "ModuleNotFoundError" in r.content


@pytest.mark.parametrize("mode", MODES)
def test_the_project_packages_are_hidden_wherever_installed_and_torch_is_not(make_ws, mode):
    """A non-editable install puts the packages in the same site-packages as torch: the packages
    go, torch stays."""
    import importlib
    import site

    import torch

    ws = make_ws(mode)
    copies = [Path(d) / name for d in site.getsitepackages() for name in _bwrap.PROJECT_PACKAGES if (Path(d) / name).is_dir()]
    for where in copies + [Path(importlib.import_module(name).__file__).resolve().parent for name in _bwrap.PROJECT_PACKAGES]:
        out = ws.run(f"ls -A {where} 2>&1").output  # installed copies, and the packages as imported here
        assert out.strip() == "" or "No such file or directory" in out, (where, out[:200])
    r = bash(ws, "python -c 'import torch, triton; print(torch.__file__)'")
    assert not r.is_error and torch.__file__ in r.content, r.content


def test_hide_covers_a_path_inside_a_mounted_directory(make_ws):
    stdlib_pkg = Path(os.__file__).parent / "email"  # inside the mounted Python environment
    ws = make_ws(hide=(str(stdlib_pkg),))
    r = bash(ws, f"ls {stdlib_pkg} | wc -l; python -c 'import json; import email.message'")
    assert r.content.splitlines()[0].strip() == "0"  # covered by an empty tmpfs
    assert "ModuleNotFoundError" in r.content  # while the rest of the environment works (json)


@pytest.mark.parametrize("mode", MODES)
def test_writing_outside_fails(project, make_ws, mode):
    victim = project / "operators/rmsnorm/hidden_shapes.py"
    before = victim.read_text()
    name = f"pwned-{os.getpid()}"
    outside = [Path(sys.prefix) / name, CHECKOUT / name, project / name, Path("/tmp") / name]
    ws = make_ws(mode)
    try:
        r = bash(ws, "; ".join([f"echo x > {victim}", *[f"echo x > {p}" for p in outside], "echo x > ../../pwned"]))
        assert "Read-only file system" in r.content or "No such file or directory" in r.content
        assert victim.read_text() == before
        assert not any(p.exists() for p in outside) and not (project / "runs/pwned").exists()
    finally:
        for p in outside:
            p.unlink(missing_ok=True)


@pytest.mark.timeout(60)
def test_fork_bomb_is_bounded_and_finishes(make_ws):
    ws = make_ws(max_processes=64, command_timeout_s=6)
    if not ws.process_limit:
        pytest.skip("the process limit does not hold in this mode (root in a user namespace)")
    # Waiting and counting /proc with a glob need no fork, so they work even at the limit (`sleep`
    # would: bash retries a failed fork for about 15 s, past the command's 6 s limit).
    r = bash(ws, "bomb() { bomb | bomb & }; bomb; SECONDS=0; until ((SECONDS >= 2)); do :; done; "
                 "n=(/proc/[0-9]*); echo count=${#n[@]}")
    assert "fork" in r.content and "Resource temporarily unavailable" in r.content
    count = int(r.content.split("count=")[1].split()[0])
    assert 32 < count <= 64 + 1  # the limit was reached and held (+1: bwrap's init, not the uid's)
    assert r.seconds < 15
    assert subprocess.run(["true"]).returncode == 0  # the runner can still start processes
    assert _all_gone(ws.uid)  # the sandbox and everything in it is gone


def _all_gone(uid: int) -> bool:
    """No process of ``uid`` left, allowing the kernel a moment to reap a dying namespace."""
    for _ in range(40):
        if not any(p.isdigit() and _uid(p) == uid for p in os.listdir("/proc")):
            return True
        time.sleep(0.05)
    return False


def _uid(pid: str) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop_times_out(make_ws, mode):
    ws = make_ws(mode, command_timeout_s=1)
    r = bash(ws, "echo started; while :; do :; done")
    assert r.is_error and "timed out" in r.content and "started" in r.content
    assert 0.9 < r.seconds < 5
    r = bash(ws, "sleep 30 & sleep 30 & wait")  # children die with it
    assert "timed out" in r.content and r.seconds < 5
    if ws.uid >= 0:
        assert _all_gone(ws.uid)


def test_background_processes_end_with_the_command(make_ws):
    ws = make_ws()
    r = bash(ws, "(sleep 60 &); setsid sleep 60 & echo left-behind")
    assert "left-behind" in r.content and r.seconds < 5 and not r.is_error
    if ws.uid >= 0:
        assert _all_gone(ws.uid)


@pytest.mark.timeout(60)
def test_gigabytes_of_output_stay_bounded(project, tmp_path):
    # In a fresh interpreter, so its peak memory is this test's alone.
    script = f"""
import resource, time
from ablate.sandbox import Limits, Workspace, _bwrap, core_tools
ws = Workspace.create({str(tmp_path / 'ws')!r}, {{}}, Limits(command_timeout_s=60))
before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # after the imports (torch among them)
r = core_tools(ws)["bash"].run({{"command": "yes | head -c 3G"}})
r2 = ws.run("yes | head -c 300M", 60)
open_ws = Workspace.create({str(tmp_path / 'ws2')!r}, {{}}, Limits(command_timeout_s=60, max_output_bytes=1 << 40))
r3 = open_ws.run("yes 2>/dev/null | head -c 300M", 60)
print(len(r.content), r.seconds, r3.output_bytes, len(r3.output), r3.exit_code, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb)
print("cut-marker" if "bytes of output cut" in r.content else "no-marker", r.content[-300:])
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, *rest = out.stdout.splitlines()
    chars, seconds, bytes3, chars3, code3, grown_kb = first.split()
    assert int(chars) < 21_000 and float(seconds) < 10  # cut to output_chars, quickly
    assert "pipe was closed" in "\n".join(rest) and "cut-marker" in rest[0]
    assert int(bytes3) == 300 << 20 and int(chars3) <= 20_100 and code3 == "0"  # read it all, kept little
    assert int(grown_kb) < 100_000  # the runner never held the 3 GB (or the 300 MB) of output


@pytest.mark.parametrize("mode", MODES)
def test_killing_the_parent_leaves_the_runner_alive(make_ws, mode):
    ws = make_ws(mode)
    # Each shows either the refusal (another uid) or that the shell went on (the namespace's
    # init ignores signals from inside); the runner is out of reach either way.
    attempts = {
        "kill -9 $PPID; echo still-here": ("still-here",),
        "python -c 'import os; os.kill(os.getppid(), 9); print(\"still-here\")'": ("Operation not permitted", "still-here"),
        "pkill -9 python; pkill -9 -f pytest; echo pkill-done": ("",),
        f"kill -9 {os.getpid()}": ("No such process",),  # the runner's pid does not exist inside
        "kill -9 -1; echo still-here": ("still-here",),
    }
    for cmd, shows in attempts.items():
        r = bash(ws, cmd)
        assert any(s in r.content for s in shows), (cmd, r.content)
    r = bash(ws, "ps -e -o pid=,comm=")
    assert "pytest" not in r.content and len(r.content.splitlines()) < 8  # only the sandbox's own
    assert "ok" in bash(ws, "echo ok").content  # and the workspace still works


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_honest_run_imports_torch_and_runs_a_triton_kernel(make_ws):
    ws = make_ws(command_timeout_s=90, gpu=False)  # the CPU interpreter, GPU or not
    tools = core_tools(ws)
    tools["write_file"].run({"path": "check.py", "content": TRITON_ADD})
    r = tools["bash"].run({"command": "python check.py"})
    assert not r.is_error, r.content
    assert "interpret=1 max_err=0.0" in r.content


TRITON_ADD = """
import os
import torch, triton
import triton.language as tl

@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) + tl.load(y_ptr + i, mask=i < n), mask=i < n)

x, y = torch.randn(1000), torch.randn(1000)
out = torch.empty_like(x)
add[(triton.cdiv(1000, 256),)](x, y, out, 1000, BLOCK=256)
print(f"interpret={os.environ.get('TRITON_INTERPRET')} max_err={(out - (x + y)).abs().max().item()}")
"""
