"""The operator contract (see docs/design.md): the definition, its inputs, shapes, tolerance,
roofline and library baselines. One folder per operator fills one of these in. How outputs are
judged lives in operators/_correctness.py."""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ablate.operators._correctness import ContractRule, Envelope, Judgement

Shape = dict[str, Any]  # e.g. {"M": 4096, "N": 4096, "dtype": "bfloat16"}

# Input distributions every make_inputs understands. Correctness is checked on all of them:
# N(0,1) alone lets approximations pass (RMS of N(0,1) rows is ~1); tiny_rows (a quarter of the
# rows all zero, half scaled by 1e-5..1e-1) is where a dropped or wrong epsilon shows.
DISTRIBUTIONS = ("normal", "offset", "large", "uniform", "tiny_rows")


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
    # shape dtype -> the error per element (relative to max(|ref|, output RMS)) that rounding
    # alone may reach; the floor and ceiling of every envelope derive from it (_correctness.py)
    tolerance: dict[str, float]
    bytes: Callable[[Shape], int]  # fewest bytes moved: each input read once, output written once
    flops: Callable[[Shape], int]
    baselines: dict[str, Baseline] = field(default_factory=dict)
    # Fully qualified names whose call in a submission is a library passthrough.
    library_calls: tuple[str, ...] = ()
    # Files the agent sees in its workspace (name -> path on disk); reference.py at least.
    task_files: dict[str, Path] = field(default_factory=dict)
    why_shapes: str = ""  # one line: why these shapes are realistic
    # How outputs are measured: a name in operators._correctness.RULES ("topk": indices under ties).
    rule: str = "envelope"
    # Clauses of the contract a library can break unseen on random inputs, each with a probe.
    contract_rules: tuple[ContractRule, ...] = ()
    # How an imported submission module becomes kernel(*inputs), as a plain description that
    # crosses processes (see operators/_entries.py). None: the module's `kernel` function.
    entry: dict[str, Any] | None = None
    # ATen operators (base names, e.g. "aten::_fused_rms_norm") that compute this operator's
    # contract, whole families of them (operators/_library_ops.py): dispatching one during the
    # kernel's call is a library passthrough, however the call was spelled in the source.
    library_ops: tuple[str, ...] = ()
    # For operators loaded from an external format: the conf/operators node that loads it
    # again (in another process), e.g. {"source": "kernelbench", "path": ..., "level": 1}.
    source: dict[str, Any] = field(default_factory=dict)

    def shape_set(self, name: str) -> list[Shape]:
        """A named set, or one shape of it: "eval[M=4096,N=4096,dtype=bfloat16]" (by shape_id)."""
        from ablate.errors import AblateError

        base, _, pick = name.partition("[")
        if base not in self.shapes:
            raise AblateError(
                f"operator {self.name!r} has no shape set {base!r}; valid sets: {', '.join(self.shapes)}"
            )
        if not pick:
            return self.shapes[base]
        chosen = [s for s in self.shapes[base] if shape_id(s) == pick.removesuffix("]")]
        if not chosen:
            raise AblateError(f"operator {self.name!r} has no shape {pick.removesuffix(']')!r} in set {base!r}; its shapes: "
                              f"{'; '.join(shape_id(s) for s in self.shapes[base])}")
        return chosen

    def kernel_of(self, module: Any) -> Callable[..., Any]:
        """The submission's entry point: kernel(*inputs) with the reference's inputs and outputs."""
        from ablate.operators._entries import kernel_of

        return kernel_of(module, self.entry)

    def verify(self, outputs: Any, inputs: tuple, expected: Any = None, envelope: Envelope | None = None) -> Judgement:
        """Judge outputs computed from `inputs` by the one correctness rule (_correctness.py).
        expected: the float64 reference's outputs (computed when None); envelope: the calibrated
        one (when None, the reference in the contract dtype alone sets it, as on a CPU)."""
        from ablate.operators import _correctness as c

        if expected is None:
            expected = c.reference_outputs(self, inputs)
        if any(getattr(t, "dtype", None) in (torch.bfloat16, torch.float16) for t in c.as_outputs(expected)):
            raise ValueError("expected must be the float64 reference's outputs (operators._correctness."
                             "reference_outputs), not outputs in the contract's dtype")
        if envelope is None:
            envelope = c.calibrate(self, inputs, c.as_outputs(expected)).envelope
        return c.judge_output(outputs, expected, envelope, inputs)


def shape_id(shape: Shape) -> str:
    """Stable, readable key for a shape: 'M=4096,N=4096,dtype=bfloat16'."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


def load_module(path: Path, name: str):
    """Import a self-contained file (a reference.py) as a module."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
