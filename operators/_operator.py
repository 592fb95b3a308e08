"""The operator contract (see DESIGN.md): the definition, its inputs, shapes, tolerance,
roofline and library baselines. One folder per operator fills one of these in."""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Shape = dict[str, Any]  # e.g. {"M": 4096, "N": 4096, "dtype": "bfloat16"}

# Input distributions every make_inputs understands. Correctness is checked on all of them:
# N(0,1) alone lets approximations pass (RMS of N(0,1) rows is ~1).
DISTRIBUTIONS = ("normal", "offset", "large", "uniform")


@dataclass(frozen=True)
class Baseline:
    """A library implementation of exactly the operator's contract."""

    name: str
    fn: Callable[..., Any]
    # Returns None when usable here, else a short reason ("liger-kernel not installed").
    unavailable: Callable[[], str | None] = lambda: None
    needs_cuda: bool = False


@dataclass(frozen=True)
class Operator:
    name: str
    goal: str  # one paragraph shown to the agent: what to compute and the contract
    reference: Callable[..., Any]  # plain PyTorch; the definition
    make_inputs: Callable[[Shape, int, str, str], tuple]  # (shape, seed, device, dist) -> inputs
    shapes: dict[str, list[Shape]]  # "smoke", "public", "eval" (= public + hidden)
    tolerance: dict[str, tuple[float, float]]  # dtype name -> (atol, rtol)
    bytes: Callable[[Shape], int]  # fewest bytes moved: each input read once, output written once
    flops: Callable[[Shape], int]
    baselines: dict[str, Baseline] = field(default_factory=dict)
    # Fully qualified names whose call in a submission is a library passthrough.
    library_calls: tuple[str, ...] = ()
    # Files the agent sees in its workspace (name -> path on disk); reference.py at least.
    task_files: dict[str, Path] = field(default_factory=dict)
    why_shapes: str = ""  # one line: why these shapes are realistic

    def shape_set(self, name: str) -> list[Shape]:
        if name not in self.shapes:
            from ablate.errors import AblateError

            raise AblateError(
                f"operator {self.name!r} has no shape set {name!r}; valid sets: {', '.join(self.shapes)}"
            )
        return self.shapes[name]


def shape_id(shape: Shape) -> str:
    """Stable, readable key for a shape: 'M=4096,N=4096,dtype=bfloat16'."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


def load_module(path: Path, name: str):
    """Import a self-contained file (a reference.py) as a module."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
