"""Shared pieces of baselines: lazily compiled functions and optional-library availability."""
from __future__ import annotations

import importlib
from collections.abc import Callable

from ablate.operators._operator import Baseline


def compiled(fn: Callable, mode: str | None = None) -> Callable:
    """torch.compile(fn), compiled on first call, specialised per shape (dynamic=False): a
    dynamic-shape kernel would be slower than what a user compiling one model shape gets."""
    state: dict = {}

    def call(*args):
        if "fn" not in state:
            import torch

            state["fn"] = torch.compile(fn, mode=mode, dynamic=False)
        return state["fn"](*args)

    return call


def compile_baselines(fn: Callable, autotune: bool = True) -> dict[str, Baseline]:
    """torch.compile of fn, default and (autotune) max-autotune (GPU only: Inductor on CPU needs a
    C++ toolchain and measures nothing of interest here)."""
    out = {"torch_compile": Baseline("torch_compile", compiled(fn), needs_cuda=True)}
    if autotune:
        out["torch_compile_max_autotune"] = Baseline(
            "torch_compile_max_autotune", compiled(fn, "max-autotune"), needs_cuda=True)
    return out


NOT_LOADED = "failed to import"  # in an unavailable library's reason: installed, but it did not load
NOT_INSTALLED = "not installed"  # ...: not there (installing it changes ablate.evaluate._gpu.VERSIONED's versions)


def missing(module: str, package: str) -> Callable[[], str | None]:
    """Availability check: None when `module` imports; '<package> not installed' when it is not
    there; '<package> failed to import: ...' when it is there and cannot load (a module it needs
    is missing, a CUDA runtime mismatch), so the fix the message points at is the right one."""

    def unavailable() -> str | None:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and (module == e.name or module.startswith(e.name + ".")):
                return f"{package} {NOT_INSTALLED}"
            return f"{package} {NOT_LOADED}: {e}"[:200]
        except Exception as e:  # a broken install (e.g. a CUDA runtime mismatch) is unavailable too
            return f"{package} {NOT_LOADED}: {type(e).__name__}: {e}"[:200]
        return None

    return unavailable


def hopper(check: Callable[[], str | None], package: str) -> Callable[[], str | None]:
    """check, and a CUDA device of compute capability 9.0 (Hopper) or newer."""

    def unavailable() -> str | None:
        import torch

        if (why := check()) is not None:
            return why
        if torch.cuda.is_available() and torch.cuda.get_device_capability() < (9, 0):
            return f"{package} needs compute capability 9.0 (Hopper) or newer"
        return None

    return unavailable


liger_unavailable = missing("liger_kernel", "liger-kernel")
quack_not_imported = missing("quack", "quack-kernels")
quack_unavailable = hopper(quack_not_imported, "quack-kernels")  # CuTe DSL kernels for sm_90+
flashinfer_unavailable = missing("flashinfer", "flashinfer-python")
# the optional libraries by package name, each with its import check (no device check)
OPTIONAL = {"liger-kernel": liger_unavailable, "flashinfer-python": flashinfer_unavailable,
            "quack-kernels": quack_not_imported}
