"""Markers: `gpu` tests skip without CUDA, `api` tests skip without a provider key. Fixtures:
`interpreted`, a Python command run under Triton's CPU interpreter."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    has_cuda = _cuda()
    has_key = bool(os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("OPENAI_API_KEY"))
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "api" in item.keywords and not has_key:
            item.add_marker(pytest.mark.skip(reason="needs ANTHROPIC_API_KEY or OPENAI_API_KEY"))


@pytest.fixture
def interpreted():
    """interpreted([python args]) -> the finished process, run from the project root in a process of
    its own with TRITON_INTERPRET=1 (it must be set before triton is imported: Triton kernels then
    run on CPU tensors)."""
    def run(args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
        env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
        return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout)

    return run
