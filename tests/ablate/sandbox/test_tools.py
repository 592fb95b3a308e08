"""The core tools: file tools stay inside the workspace, bash reports what happened."""
import os

import pytest

from ablate.sandbox import Limits, Workspace, core_tools

SECRET = "SECRET-7f3a"


@pytest.fixture
def ws(tmp_path):
    return Workspace.create(tmp_path / "runs/t/workspace", {"task.md": b"goal"}, Limits(command_timeout_s=20, output_chars=2000))


@pytest.fixture
def outside(tmp_path):
    p = tmp_path / "hidden_shapes.py"
    p.write_text(SECRET)
    return p


def test_write_then_read_and_edit_from_the_shell(ws):
    t = core_tools(ws)
    assert not t["write_file"].run({"path": "src/kernel.py", "content": "def kernel(x):\n    return x\n"}).is_error
    assert t["read_file"].run({"path": "src/kernel.py"}).content.startswith("def kernel")
    r = t["bash"].run({"command": "echo '# edited' >> src/kernel.py && mkdir -p more && cat src/kernel.py"})
    assert not r.is_error and "# edited" in r.content  # the agent's commands may change what tools wrote
    assert t["read_file"].run({"path": "/workspace/src/kernel.py"}).content.endswith("# edited\n")


def test_symlink_to_outside_is_refused_by_read_and_write(ws, outside):
    t = core_tools(ws)
    os.symlink(outside, ws.path / "link.py")
    os.symlink(outside.parent, ws.path / "linkdir")
    r = t["read_file"].run({"path": "link.py"})
    assert r.is_error and "outside the workspace" in r.content and SECRET not in r.content
    for path in ["link.py", "linkdir/hidden_shapes.py", "linkdir/new.py"]:
        r = t["write_file"].run({"path": path, "content": "pwned"})
        assert r.is_error and "outside the workspace" in r.content
    assert outside.read_text() == SECRET and not (outside.parent / "new.py").exists()


def test_symlink_made_by_the_agent_to_the_checkout_is_refused(ws):
    checkout_file = os.path.join(os.path.dirname(__file__), "test_tools.py")  # readable by the runner
    t = core_tools(ws)
    t["bash"].run({"command": f"ln -s {os.path.dirname(checkout_file)} ops; ln -s {checkout_file} k.py"})
    assert os.path.islink(ws.path / "ops")  # the link exists on the host, pointing out
    for path in ["ops/test_tools.py", "k.py"]:
        r = t["read_file"].run({"path": path})
        assert r.is_error and "outside the workspace" in r.content


def test_symlink_inside_the_workspace_is_fine(ws):
    t = core_tools(ws)
    t["write_file"].run({"path": "v3.py", "content": "v3"})
    os.symlink("v3.py", ws.path / "kernel.py")
    assert t["read_file"].run({"path": "kernel.py"}).content == "v3"


@pytest.mark.timeout(10)
def test_reading_a_fifo_does_not_hang_the_runner(ws):
    os.mkfifo(ws.path / "pipe")
    for name, args in [("read_file", {"path": "pipe"}), ("write_file", {"path": "pipe", "content": "x"})]:
        r = core_tools(ws)[name].run(args)
        assert r.is_error and ("not a regular file" in r.content or "No such device" in r.content)


def test_write_size_limit(tmp_path):
    ws = Workspace.create(tmp_path / "ws", {}, Limits(max_file_bytes=1000))
    t = core_tools(ws)
    r = t["write_file"].run({"path": "big.py", "content": "x" * 1001})
    assert r.is_error and "file limit" in r.content and not (ws.path / "big.py").exists()
    r = t["bash"].run({"command": "head -c 5000 /dev/zero > big.bin"})
    assert r.is_error and "File too large" in r.content  # RLIMIT_FSIZE inside too
    assert os.path.getsize(ws.path / "big.bin") == 1000


def test_reading_a_huge_file_is_bounded(ws):
    with open(ws.path / "log.txt", "w") as f:
        f.write("first line\n" + "x" * 5_000_000 + "\nlast line\n")
    r = core_tools(ws)["read_file"].run({"path": "log.txt"})
    assert len(r.content) < 2200 and r.content.startswith("first line") and r.content.endswith("last line\n")
    assert "middle cut" in r.content


def test_list_files_marks_dirs_hides_caches_and_does_not_follow_links(ws, outside):
    t = core_tools(ws)
    t["write_file"].run({"path": "a/b.py", "content": ""})
    t["write_file"].run({"path": ".cache/triton/x.bin", "content": ""})
    os.symlink(outside.parent, ws.path / "out")
    listing = t["list_files"].run({}).content.splitlines()
    assert listing == ["a/", "a/b.py", f"out -> {outside.parent}", "task.md"]
    assert t["list_files"].run({"path": "a"}).content == "a/b.py"
    assert t["list_files"].run({"path": "out"}).is_error


def test_submit_needs_a_kernel_inside_the_workspace(ws, outside):
    t = core_tools(ws)
    r = t["submit"].run({})
    assert r.is_error and not r.submitted
    os.symlink(outside, ws.path / "kernel.py")
    r = t["submit"].run({})
    assert r.is_error and not r.submitted
    os.unlink(ws.path / "kernel.py")
    t["write_file"].run({"path": "kernel.py", "content": "def kernel(x): return x"})
    assert t["submit"].run({}).submitted


def test_bash_reports_exit_code_time_and_gpu_seconds(ws):
    t = core_tools(ws)
    r = t["bash"].run({"command": "echo out; echo err >&2; exit 3"})
    assert r.is_error and "out" in r.content and "err" in r.content and "exit code 3" in r.content
    assert r.seconds > 0
    assert r.gpu_seconds == (r.seconds if ws.gpu_visible else 0.0)
    assert not t["bash"].run({"command": "true"}).is_error


def test_bash_timeout_argument_is_capped_by_the_limit(tmp_path):
    ws = Workspace.create(tmp_path / "ws", {}, Limits(command_timeout_s=1))
    r = core_tools(ws)["bash"].run({"command": "sleep 10", "timeout_s": 100})
    assert "timed out" in r.content and r.seconds < 4


def test_bad_arguments_are_error_results_not_exceptions(ws):
    t = core_tools(ws)
    assert "missing argument" in t["bash"].run({}).content
    assert t["read_file"].run({"path": "nope.py"}).is_error
    assert t["read_file"].run({"path": "."}).is_error


def test_tool_specs_name_the_inner_path(ws):
    specs = {name: tool.spec for name, tool in core_tools(ws).items()}
    assert set(specs) == {"bash", "read_file", "write_file", "list_files", "submit"}
    assert "/workspace" in specs["bash"].description
    assert specs["write_file"].parameters["required"] == ["path", "content"]


@pytest.mark.timeout(10)
def test_read_bytes_for_the_runner_refuses_links_out_fifos_and_huge_files(tmp_path, outside):
    ws = Workspace.create(tmp_path / "ws", {}, Limits(max_file_bytes=100))
    ws.write("kernel.py", b"def kernel(x): return x")
    assert ws.read_bytes("kernel.py") == b"def kernel(x): return x"
    os.symlink(outside, ws.path / "linked.py")
    os.mkfifo(ws.path / "fifo.py")
    (ws.path / "big.py").write_bytes(b"x" * 101)
    for name, why in [("linked.py", "outside"), ("fifo.py", "not a regular file"), ("big.py", "over the")]:
        with pytest.raises(PermissionError, match=why):
            ws.read_bytes(name)


def test_files_written_for_the_agent_belong_to_the_sandbox_uid(ws):
    ws.write("wiki/notes.md", b"doc")
    if ws.uid >= 0:
        assert os.stat(ws.path / "wiki").st_uid == ws.uid == os.stat(ws.path / "wiki/notes.md").st_uid
    r = core_tools(ws)["bash"].run({"command": "echo more >> wiki/notes.md && touch wiki/new && cat wiki/notes.md"})
    assert not r.is_error and "docmore" in r.content.replace("\n", "")
