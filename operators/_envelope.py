"""What one shape and input distribution allows, and the judgement of one set of outputs against it.

The envelope of one shape and input distribution is, per statistic (_error_stats),

    bound = max(FLOOR, SLACK * reference's, min(CEILING, SLACK * worst passing library's))

with FLOOR and CEILING fixed multiples of the operator's per-dtype `tol` (the error per element
that rounding alone may reach; 2**-7 for bfloat16 outputs). The reference in the contract dtype
always sits inside its envelope; a library widens it only up to the ceiling, which a 1% bias
already exceeds. ``margin`` is a kernel's worst statistic over its bound (<= 1 passes; inf for
NaN, a wrong structure or an operator rule's violation). An operator with its own rule
(``Operator.rule``: "topk" for tie-ambiguous indices) plugs in through ``RULES``; contractions
need none, since every statistic is relative to the output's scale.

Part of the one correctness rule (operators/_correctness.py, its public face).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import torch

from ablate.operators._error_stats import Stats, error_stats, worst_element

# Unit roundoff of each output dtype: the largest relative error of one rounding to nearest.
UNIT = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53}
# Per-element tolerance of an output rounded once to its dtype from a float32 computation: two
# units (a second rounding, e.g. a bf16 intermediate of a library, stays within it).
TOLERANCE = {"bfloat16": 2 * UNIT["bfloat16"], "float16": 2 * UNIT["float16"], "float32": 1e-5}

SLACK = 2.0  # what an implementation may show beyond the envelope's members (another draw, order)
# The rule's edition: it changes whenever a statistic or a bound changes meaning, so envelopes
# cached under an earlier edition are calibrated again (2: the max statistic's row size).
EDITION = 2


@dataclass(frozen=True)
class Bounds:
    """Largest allowed value of each statistic (rms, max, frac) for one output."""

    rms: float
    max: float
    frac: float

    def as_dict(self) -> dict:
        return asdict(self)


def floor(tol: float) -> Bounds:
    """Bounds no envelope goes below. Measured in bf16 (tol = 2**-7) on the CPU, 1e5-1e6 elements
    (tests/operators/kernels; the GPU libraries: benchmarks/calibration.py): one rounding reaches rms
    0.2 tol and max 0.45 tol; a second rounding (a bf16 intermediate, as F.silu * up and Liger's
    RMSNorm keep) rms 0.3 tol, max 0.85 tol; a flash-style bf16 P rms 0.27 tol, max 1.8 tol and
    2e-4 of the elements beyond tol; partial sums of a split-K GEMM in bf16 max 2.4 tol, 9e-4
    beyond tol. (Those maxima were read against the output's RMS; sized by rows too they are no
    larger. On the H200's eval shapes a bf16 P reads 0.9-2.0 tol: ../benchmarks/results/h200-rowsize.)"""
    return Bounds(rms=tol / 2, max=4 * tol, frac=2e-3)


def ceiling(tol: float) -> Bounds:
    """Bounds no library can widen the envelope past: a 1% bias in bf16 has rms 0.9-1.3 tol (the
    lowest where the outputs share one binade, as an offset GEMM's do), a stale row max ~1."""
    return Bounds(rms=0.75 * tol, max=32 * tol, frac=2e-2)

@dataclass(frozen=True)
class Envelope:
    """What one shape and input distribution allows: bounds per output, and who set them."""

    tol: float
    bounds: tuple[Bounds, ...]
    dtypes: tuple[str, ...]  # the contract's output dtypes ("" for a Python number)
    members: tuple[str, ...] = ("reference",)  # the reference in the contract dtype, then libraries
    rule: str = "envelope"

    def as_dict(self) -> dict:
        return {"tol": self.tol, "rule": self.rule, "dtypes": list(self.dtypes), "members": list(self.members),
                "bounds": [b.as_dict() for b in self.bounds]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Envelope:
        return cls(tol=float(d["tol"]), bounds=tuple(Bounds(**b) for b in d["bounds"]), dtypes=tuple(d["dtypes"]),
                   members=tuple(d.get("members", ("reference",))), rule=str(d.get("rule", "envelope")))


class Judgement(NamedTuple):
    ok: bool
    margin: float  # worst statistic / its bound: <= 1 passes
    message: str  # "" when ok
    stats: tuple[Stats, ...]  # one per output

    @property
    def max_abs(self) -> float:
        return max((s.max_abs for s in self.stats), default=0.0)


# -- envelopes -------------------------------------------------------------------------------
def _floating(dtype: str) -> bool:
    """A floating output dtype ("" is a Python number)."""
    t = getattr(torch, dtype, None) if dtype else torch.float64
    return isinstance(t, torch.dtype) and t.is_floating_point


def envelope(reference: Sequence[Stats], libraries: Mapping[str, Sequence[Stats]], tol: float,
             dtypes: Sequence[str], rule: str = "envelope") -> Envelope:
    """The envelope set by the reference in the contract dtype and the given libraries' stats
    (one Stats per output each); integer outputs and the exact rules allow no error at all."""
    if rule not in RULES:
        raise ValueError(f"unknown correctness rule {rule!r}; valid: {', '.join(RULES)}")
    bounds = []
    for i, dtype in enumerate(dtypes):
        if not _floating(dtype) or RULES[rule].exact:
            bounds.append(Bounds(0.0, 0.0, 0.0))
            continue
        lo, hi, ref = floor(tol), ceiling(tol), reference[i]
        libs = [s[i] for s in libraries.values()]

        def bound(k: str) -> float:
            worst = max((getattr(s, k) for s in libs), default=0.0)
            return max(getattr(lo, k), SLACK * getattr(ref, k), min(getattr(hi, k), SLACK * worst))

        bounds.append(Bounds(rms=bound("rms"), max=bound("max"), frac=bound("frac")))
    return Envelope(tol=tol, bounds=tuple(bounds), dtypes=tuple(dtypes),
                    members=("reference", *libraries), rule=rule)


def margin(stats: Sequence[Stats], env: Envelope) -> tuple[float, str]:
    """(worst statistic / its bound over every output, a message naming it; "" within bounds)."""
    m, msg, _ = _margin(stats, env)
    return m, msg


def _margin(stats: Sequence[Stats], env: Envelope) -> tuple[float, str, int]:
    worst, msg, at = 0.0, "", 0
    for i, (s, b) in enumerate(zip(stats, env.bounds)):
        if s.problem:
            return math.inf, f"output {i}: {s.problem}", i
        if s.nonfinite:
            return math.inf, (f"output {i}: {s.nonfinite:,} of {s.n:,} elements NaN or Inf where the reference is "
                              "finite (or not the reference's own NaN or Inf)"), i
        ratios = {k: (getattr(s, k) / getattr(b, k) if getattr(b, k) > 0 else (math.inf if getattr(s, k) > 0 else 0.0))
                  for k in ("rms", "max", "frac")}
        m = max(ratios.values())
        if m > worst:
            worst, at = m, i
            if m > 1:
                if b.rms == b.max == b.frac == 0.0:
                    what = f"{round(s.frac * s.n):,} of {s.n:,} elements differ where the output must be exact"
                else:
                    over = [k for k, r in ratios.items() if r > 1]
                    what = "error beyond the envelope: " + ", ".join(
                        f"{_NAMES[k]} {getattr(s, k):.3g} > {getattr(b, k):.3g}" for k in over)
                msg = f"output {i}: {what} (max abs error {s.max_abs:.4g}, output scale {s.scale:.4g})"
    return worst, msg, at


_NAMES = {"rms": "rms error / scale", "max": "max error / (|ref| + size)", "frac": "fraction beyond tolerance"}


# -- rules -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """How outputs are measured: measure(outs, refs, tol, inputs) -> one Stats per output."""

    measure: Callable[[list, list, float, tuple], tuple[Stats, ...]]
    exact: bool = False  # every bound is zero


def _measure_elementwise(outs: list, refs: list, tol: float, inputs: tuple) -> tuple[Stats, ...]:
    return tuple(error_stats(o, r, tol) for o, r in zip(outs, refs))


def _measure_topk(outs: list, refs: list, tol: float, inputs: tuple) -> tuple[Stats, ...]:
    """Top-k: values exactly the expected sorted values; indices valid, distinct per row, and
    pointing at those values. Ties make the indices ambiguous, so they are not compared."""
    if len(inputs) < 2:
        raise ValueError("the topk rule needs the inputs (x, k)")
    x = inputs[0]
    values, indices = outs
    exp_values = torch.as_tensor(refs[0]).to(x.device)
    values, indices = values.to(x.device), indices.to(x.device)
    vstats = error_stats(values, exp_values, 0.0)
    if vstats.max_abs or vstats.nonfinite:
        vstats = Stats(**{**vstats.as_dict(), "problem": "values differ from the k largest of each row in descending order"})
    problem = ""
    if bool(((indices < 0) | (indices >= x.shape[1])).any()):
        problem = f"indices outside [0, {x.shape[1]})"
    elif indices.shape[1] > 1 and bool((indices.sort(dim=1).values.diff(dim=1) == 0).any()):
        problem = "an index repeats within a row"
    picked = x.gather(1, indices.clamp(0, x.shape[1] - 1))
    istats = error_stats(picked, exp_values, 0.0)
    if not problem and (istats.max_abs or istats.nonfinite):
        problem = "x at the returned indices differs from the returned values"
    return vstats, Stats(**{**istats.as_dict(), "problem": problem})


RULES: dict[str, Rule] = {
    "envelope": Rule(_measure_elementwise),
    "topk": Rule(_measure_topk, exact=True),
}


# -- judging one output set ------------------------------------------------------------------
_SCALARS = (int, float, bool)


def as_outputs(x: Any) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.") if isinstance(t, torch.Tensor) else ""


def structure_problem(outs: list, refs: list, dtypes: Sequence[str]) -> str:
    """Why the outputs cannot be compared with the reference's (count, type, shape, dtype); "" if they can."""
    if len(outs) != len(refs):
        return f"expected {len(refs)} output(s), got {len(outs)}"
    for i, (o, r, dtype) in enumerate(zip(outs, refs, dtypes)):
        if not isinstance(r, torch.Tensor):  # a Python number (FlashInfer definitions)
            if not isinstance(o, _SCALARS) and not (isinstance(o, torch.Tensor) and o.numel() == 1):
                return f"output {i}: expected a number, got {type(o).__name__}"
            continue
        if not isinstance(o, torch.Tensor):
            return f"output {i}: expected a tensor, got {type(o).__name__}"
        if o.is_complex() or r.is_complex():
            return f"output {i}: complex outputs are not supported"
        if tuple(o.shape) != tuple(r.shape):
            return f"output {i}: shape {tuple(o.shape)} != expected {tuple(r.shape)}"
        if dtype and dtype_name(o) != dtype:
            return f"output {i}: dtype {dtype_name(o)} != expected {dtype}"
    return ""


def judge_output(out: Any, ref: Any, env: Envelope, inputs: tuple = ()) -> Judgement:
    """Judge one set of outputs against the float64 reference's (`reference_outputs`) within
    `env`. `inputs` are needed by operator rules that look at them (top-k)."""
    outs, refs = as_outputs(out), as_outputs(ref)
    why = structure_problem(outs, refs, env.dtypes)
    if why:
        return Judgement(False, math.inf, why, ())
    stats = RULES[env.rule].measure(outs, refs, env.tol, inputs)
    m, msg, i = _margin(stats, env)
    if m <= 1:
        return Judgement(True, m, "", stats)
    if isinstance(refs[i], torch.Tensor) and torch.as_tensor(outs[i]).is_floating_point() and not stats[i].problem:
        idx, got, want = worst_element(outs[i], refs[i])
        msg += f"; worst at {idx}: got {got:.6g}, expected {want:.6g}"
    return Judgement(False, m, msg, stats)


__all__ = ["EDITION", "RULES", "SLACK", "TOLERANCE", "UNIT", "Bounds", "Envelope", "Judgement", "Rule", "as_outputs",
           "ceiling", "dtype_name", "envelope", "floor", "judge_output", "margin", "structure_problem"]
