"""The envelope of one input set, calibrated: the float64 reference, the reference in the contract
dtype and the production libraries on the same inputs (``calibrate``).

A library passes when it lies within the envelope of the reference and the *other* passing
libraries (so a kernel as good as it passes too); one that breaks a named contract rule of its
operator (``ContractRule``: a probe input on which the breach is glaring, such as an intermediate
stored in bfloat16) is excluded by that rule's name. ``calibrate`` costs one call of each
implementation and of the reference in the contract dtype.

Part of the one correctness rule (operators/_correctness.py, its public face).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from ablate.operators._envelope import (RULES, Envelope, as_outputs, dtype_name, envelope, margin,
                                        structure_problem)
from ablate.operators._error_stats import Stats

if TYPE_CHECKING:
    from ablate.operators._operator import Operator


class Verdict(NamedTuple):
    """One implementation's standing in a calibration."""

    status: str  # "pass" | "fail" (outside the others' envelope) | "excluded" (a contract rule) | "error"
    margin: float | None
    message: str
    stats: tuple[Stats, ...] = ()
    rule: str | None = None  # the contract rule that excluded it

    def as_dict(self) -> dict:
        return {"status": self.status, "margin": _finite(self.margin), "message": self.message,
                "rule": self.rule, "stats": [s.as_dict() for s in self.stats]}


class Calibration(NamedTuple):
    envelope: Envelope
    verdicts: dict[str, Verdict]
    reference: tuple[Stats, ...]  # the reference in the contract dtype, against the float64 one
    seconds: dict[str, float]  # each implementation's wall time here (a torch.compile's compile with it)


@dataclass(frozen=True)
class ContractRule:
    """A clause of an operator's contract that an implementation can break with an error too
    small to see on random inputs (a bfloat16 intermediate). `probe(inputs)` builds inputs of
    the same shapes on which a breach is glaring; an implementation breaks the rule when, on
    them, some output element is off by more than `limit` relative to the float64 reference's
    element (zero where it is zero)."""

    name: str
    text: str
    probe: Callable[[tuple], tuple]
    limit: float


# -- references and calibration --------------------------------------------------------------
def upcast(inputs: tuple) -> tuple:
    """Floating inputs in float64, for the reference."""
    return tuple(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs)


def reference_outputs(op: Operator, inputs: tuple) -> tuple:
    """The reference computed in float64 from upcast inputs, kept in float32 (its rounding is far
    below any tolerance) unless the contract itself is float64."""
    keep64 = any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in inputs)
    outs = as_outputs(op.reference(*upcast(inputs)))
    return tuple(t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() and not keep64 else t for t in outs)


def contract_dtype(inputs: tuple) -> str:
    """The shape's dtype: that of the first floating input (what the operator's tolerance is keyed by)."""
    return next((dtype_name(t) for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()), "float32")


def tolerance_of(op: Operator, dtype: str) -> float:
    if dtype not in op.tolerance:
        raise ValueError(f"operator {op.name!r} gives no tolerance for {dtype}; it has {', '.join(op.tolerance)}")
    return float(op.tolerance[dtype])


def breaks(rule: ContractRule, op: Operator, fn: Callable[..., Any], inputs: tuple) -> str:
    """Why fn breaks `rule` on the rule's probe built from `inputs`, "" if it does not."""
    probe = rule.probe(inputs)
    return _violation(rule, fn, probe, reference_outputs(op, probe))


def _violation(rule: ContractRule, fn: Callable[..., Any], probe: tuple, refs: Sequence) -> str:
    """The largest error per element relative to the float64 reference's on the probe, if above the limit."""
    outs = as_outputs(fn(*probe))
    worst = 0.0
    for o, r in zip(outs, refs):
        if not isinstance(r, torch.Tensor) or not r.is_floating_point():
            continue
        o = torch.as_tensor(o).to(r.device, torch.float64)
        r = r.double()
        if tuple(o.shape) != tuple(r.shape):
            return f"output shape {tuple(o.shape)} != {tuple(r.shape)} on the probe of contract rule {rule.name}"
        rel = torch.where(r != 0, (o - r).abs() / r.abs().clamp_min(1e-300), torch.where(o == 0, 0.0, math.inf))
        worst = max(worst, float(rel.nan_to_num(nan=math.inf).max()) if rel.numel() else 0.0)
    if worst > rule.limit:
        return (f"breaks contract rule {rule.name} ({rule.text}): on its probe an element is off by "
                f"{worst:.3g} of its value, the rule allows {rule.limit:.3g}")
    return ""


def calibrate(op: Operator, inputs: tuple, ref: Sequence | None = None,
              implementations: Mapping[str, Callable[..., Any]] | None = None,
              dtype: str | None = None) -> Calibration:
    """The envelope of one input set (one shape and distribution), and each implementation's
    verdict. `ref`: the float64 reference's outputs (computed when None). Without
    implementations (a CPU run) the reference in the contract dtype alone sets the envelope.
    An implementation that raises or returns the wrong structure gets "error"; one that breaks
    an `op.contract_rules` rule "excluded"; the others pass when they lie within the envelope of
    the reference and the other passing libraries ("fail" otherwise, dropped from the envelope).
    Each contract rule's probe and its float64 reference are built once, and only with libraries."""
    refs = list(ref) if ref is not None else list(reference_outputs(op, inputs))
    tol = tolerance_of(op, dtype or contract_dtype(inputs))
    mine = as_outputs(op.reference(*inputs))
    dtypes = tuple(dtype_name(t) for t in mine)
    why = structure_problem(mine, refs, dtypes)
    if why:
        raise ValueError(f"operator {op.name!r}: its reference does not match the float64 one: {why}")
    measure = RULES[op.rule].measure
    ref_stats = measure(mine, refs, tol, inputs)
    del mine
    probes: dict[str, tuple] = {}  # rule name -> (probe inputs, their float64 reference), built once

    def violations(fn) -> list[tuple[str, str]]:
        found = []
        for rule in op.contract_rules:
            if rule.name not in probes:
                probe = rule.probe(inputs)
                probes[rule.name] = (probe, reference_outputs(op, probe))
            if why := _violation(rule, fn, *probes[rule.name]):
                found.append((rule.name, why))
        return found

    verdicts: dict[str, Verdict] = {}
    measured: dict[str, tuple[Stats, ...]] = {}
    seconds: dict[str, float] = {}
    for name, fn in (implementations or {}).items():
        t0 = time.perf_counter()
        try:
            outs = as_outputs(fn(*inputs))
            why = structure_problem(outs, refs, dtypes)
            stats = () if why else measure(outs, refs, tol, inputs)
            del outs
            broken = [] if why else violations(fn)
        except Exception as e:  # a library that fails on this input is reported, not fatal
            verdicts[name] = Verdict("error", None, f"raised {type(e).__name__}: {str(e)[:300]}")
            continue
        finally:
            seconds[name] = round(time.perf_counter() - t0, 3)
        if why:
            verdicts[name] = Verdict("error", None, why)
        elif broken:
            verdicts[name] = Verdict("excluded", None, broken[0][1], stats, broken[0][0])
        else:
            measured[name] = stats
    members = dict(measured)
    while True:  # leave-one-out until stable: removing a library only narrows the others' envelope
        judged = {name: margin(stats, envelope(ref_stats, {k: v for k, v in members.items() if k != name},
                                                tol, dtypes, op.rule)) for name, stats in members.items()}
        out = [name for name, (m, _) in judged.items() if m > 1]
        for name, (m, msg) in judged.items():
            verdicts[name] = Verdict("fail" if m > 1 else "pass", m, msg, members[name])
        if not out:
            break
        for name in out:
            del members[name]
    env = envelope(ref_stats, members, tol, dtypes, op.rule)
    order = list(implementations or {})
    return Calibration(env, {k: verdicts[k] for k in order}, ref_stats, seconds)


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


__all__ = ["Calibration", "ContractRule", "Verdict", "breaks", "calibrate", "contract_dtype", "reference_outputs",
           "tolerance_of", "upcast"]
