"""A throwaway project laid out like the real one, with the agent's workspace inside it.

The planted files stand for what the agent must never read: the evaluator's hidden shapes,
another trial's record, a knowledge document of another arm, the scripted policy's templates.
"""
import os
from pathlib import Path

import pytest

from ablate.sandbox import Limits, Workspace
from ablate.sandbox import _bwrap, _workspace

SECRET = "SECRET-7f3a"  # what the planted files contain; must never show in a confined result
PLANTED = {
    "operators/rmsnorm/hidden_shapes.py": f"EVAL = [(8192, 8192)]  # {SECRET}\n",
    "runs/other-trial/record.json": f'{{"kernel": "{SECRET}"}}\n',
    "harnesses/knowledge/tiling.md": f"# Tiling {SECRET}\n",
    "harnesses/scripted/templates/rmsnorm.py": f"# {SECRET}\n",
}


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    for rel, text in PLANTED.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def make_ws(project):
    """Workspaces at runs/this-trial/workspace of ``project``; ``mode`` forces root or userns."""

    def make(mode: str | None = None, **limits) -> Workspace:
        limits.setdefault("command_timeout_s", 30)
        ws = Workspace.create(project / "runs/this-trial/workspace", {"task.md": b"write kernel.py"}, Limits(**limits))
        if mode and mode != ws.mode:
            # Only userns can be forced: root mode was tried first and did not pass here.
            err = "root mode needs a root runner whose bwrap can mount" if mode == "root" else \
                _bwrap.self_test(ws.bwrap, ws.path, mode, -1)
            if err:
                pytest.skip(f"bwrap mode {mode} does not run here: {err}")
            if mode == "userns":  # the files go back to the runner's uid, which userns mode runs as
                for p in [ws.path, *ws.path.rglob("*")]:
                    os.chown(p, os.geteuid(), os.getegid(), follow_symlinks=False)
            ws.mode, ws.uid = "userns", -1
        return ws

    return make


@pytest.fixture
def unconfined(monkeypatch):
    """Build unconfined workspaces without printing the warning in every test."""
    monkeypatch.setattr(_workspace, "_warned_unconfined", True)
