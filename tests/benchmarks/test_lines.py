"""benchmarks/_lines.py: a benchmark's first line names the code that ran, and says so when the
checkout's files are not its commit's."""
import subprocess

from benchmarks import _lines


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def test_the_commit_is_marked_dirty_when_tracked_files_differ_from_it(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-q", "-m", "a")
    monkeypatch.chdir(tmp_path)
    clean = _lines.code()
    assert clean["commit"] and not clean["commit"].endswith("-dirty")
    (tmp_path / "untracked.txt").write_text("results\n")  # a run's own outputs do not make it dirty
    assert _lines.code()["commit"] == clean["commit"]
    (tmp_path / "a.py").write_text("x = 2\n")  # files newer than the commit: that commit did not run
    assert _lines.code()["commit"] == clean["commit"] + "-dirty"


def test_outside_a_checkout_there_is_no_commit_but_the_package_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got = _lines.code()
    assert got["commit"] == "" and got["ablate"].endswith("ablate")
