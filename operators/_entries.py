"""How a submission module becomes kernel(*inputs): the entry point an operator asks for.

Self-contained (the standard library and torch only): the evaluator's candidate process imports
it without the rest of `operators`. An entry is a plain description, so it can cross processes:

    {"kind": "function", "name": "kernel"}           the module's kernel(*inputs)
    {"kind": "kernelbench", "problem": PATH, "seed": 42}
        kernel(*inputs) if the module defines it, else the module's class ModelNew built from
        the problem file's get_init_inputs() under the seed, as KernelBench builds Model, so
        parameters created the same way match.
"""
from __future__ import annotations

import importlib.util
from typing import Any

import torch

FUNCTION = {"kind": "function", "name": "kernel"}


def load_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seeded(build, seed: int):
    """build() under torch.manual_seed(seed), leaving the caller's RNG state alone."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def module_runner(cls, problem, seed: int, compile_mode: str | None = None):
    """kernel(*inputs) calling cls(*problem.get_init_inputs()), built once per device and float
    dtype under `seed`; its parameters follow the inputs' dtype, so a float64 reference stays
    float64. compile_mode: torch.compile the built model ("default" or "max-autotune")."""
    models: dict[tuple[str, Any], Any] = {}

    def run(*inputs):
        dev = next((t.device for t in inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
        dtype = next((t.dtype for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
        if (str(dev), dtype) not in models:
            model = seeded(lambda: cls(*problem.get_init_inputs()), seed).to(dev).eval()
            has_float = any(p.is_floating_point() for p in list(model.parameters()) + list(model.buffers()))
            model = model.to(dtype) if dtype is not None and has_float else model
            if compile_mode:
                model = torch.compile(model, mode=None if compile_mode == "default" else compile_mode, dynamic=False)
            models[(str(dev), dtype)] = model
        with torch.no_grad():
            return models[(str(dev), dtype)](*inputs)

    return run


def kernel_of(module, entry: dict | None = None):
    """The submission's kernel(*inputs). Raises ValueError when the module has no such entry."""
    entry = entry or FUNCTION
    if entry.get("kind") == "kernelbench":
        if callable(getattr(module, "kernel", None)):
            return module.kernel
        if isinstance(getattr(module, "ModelNew", None), type):
            problem = load_file(entry["problem"], "kernelbench_problem")
            return module_runner(module.ModelNew, problem, int(entry.get("seed", 42)))
        raise ValueError("submission defines neither kernel(*inputs) nor class ModelNew")
    fn = getattr(module, entry.get("name", "kernel"), None)
    if not callable(fn):
        raise ValueError(f"submission defines no function {entry.get('name', 'kernel')}(*inputs)")
    return fn
