"""A per-trial directory holding only the task files, and a way to run commands in it."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Limits:
    command_timeout_s: float = 120.0  # one shell command, wall clock
    output_chars: int = 20_000  # tool output shown to the model is truncated to this


@dataclass
class ExecResult:
    output: str  # stdout and stderr, interleaved
    exit_code: int
    timed_out: bool
    seconds: float


class Workspace:
    def __init__(self, path: Path, limits: Limits = Limits()):
        self.path = Path(path).resolve()
        self.limits = limits

    @classmethod
    def create(cls, path: Path, files: dict[str, bytes], limits: Limits = Limits()) -> "Workspace":
        path = Path(path)
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        for name, data in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(data)
        return cls(path, limits)

    def resolve(self, rel: str) -> Path:
        """A path inside the workspace; refuses anything that escapes it."""
        p = (self.path / rel).resolve()
        if p != self.path and self.path not in p.parents:
            raise PermissionError(f"{rel}: outside the workspace")
        return p

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET")}
        env.update(HOME=str(self.path), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
        return env

    def run(self, command: str, timeout_s: float | None = None) -> ExecResult:
        timeout_s = timeout_s or self.limits.command_timeout_s
        start = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command], cwd=self.path, env=self.env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, _ = proc.communicate()
            timed_out = True
        return ExecResult(out.decode(errors="replace"), proc.returncode, timed_out, time.monotonic() - start)
