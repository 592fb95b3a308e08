"""An external kernel file (a published agent's kernel.py) registered as a baseline."""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from ablate.operators._operator import Baseline, Operator, load_module


def external_baseline(op: Operator, name: str, path: str | Path) -> Baseline:
    """A baseline that imports `path` on first use and calls its kernel(*inputs) (or whatever
    the operator's entry makes of it, e.g. a KernelBench ModelNew). Available iff the file exists."""
    path = Path(path).expanduser()
    state: dict = {}

    def run(*inputs):
        if "fn" not in state:
            tag = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
            state["fn"] = op.kernel_of(load_module(path, f"ablate_external_{tag}"))
        return state["fn"](*inputs)

    def unavailable():
        return None if path.is_file() else f"kernel file {path} not found"

    # Published kernels target GPUs; the evaluator runs them only there.
    return Baseline(name, run, unavailable, needs_cuda=True)


def with_external_baselines(op: Operator, files: dict[str, str | Path]) -> Operator:
    """A copy of op with one baseline per {name: /path/kernel.py}; a name may not shadow a library."""
    if not files:
        return op
    clash = sorted(set(files) & set(op.baselines))
    if clash:
        from ablate.errors import AblateError

        raise AblateError(f"external baseline name(s) {', '.join(clash)} already used by operator {op.name!r}")
    extra = {name: external_baseline(op, name, path) for name, path in files.items()}
    return dataclasses.replace(op, baselines={**op.baselines, **extra})
