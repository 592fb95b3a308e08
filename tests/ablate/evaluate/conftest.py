"""Shared helpers: the kernels folder, and evaluations cached per test session (each one starts
two Python processes, so tests that read the same result share it)."""
from pathlib import Path

import pytest

KERNELS = Path(__file__).parent / "kernels"
_results: dict = {}


@pytest.fixture(scope="session")
def kernels() -> Path:
    return KERNELS


@pytest.fixture(scope="session")
def judged():
    """judged("name", **kwargs) -> the result of evaluating kernels/name.py on the smoke shapes."""
    from ablate.evaluate import evaluate

    def run(name: str, **kwargs):
        kwargs = {"shapes": "smoke", "seed": 7, **kwargs}
        key = (name, tuple(sorted(kwargs.items())))
        if key not in _results:
            _results[key] = evaluate("rmsnorm", KERNELS / f"{name}.py", **kwargs)
        return _results[key]

    return run
