"""Markers: `gpu` tests skip without CUDA, `api` tests skip without a provider key."""
import os

import pytest


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
