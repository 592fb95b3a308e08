"""The one correctness rule: a kernel's error must lie within the envelope that the reference
computed in the contract's dtype and the production libraries show on the same inputs.

Errors are measured against the reference computed in float64 from upcast inputs (kept in
float32, as the judge keeps it), for each output tensor, in a few fused reductions over chunks
(memory stays bounded on any problem size):

    scale     RMS of the reference (its finite elements): the output's size
    rms       RMS(out - ref) / scale                   catches a bias, a wrong epsilon or scale
    max       max |out - ref| / (|ref| + size)         catches a stale row, a broken tail block
    frac      fraction of elements whose max-ratio exceeds the operator's tolerance `tol`

where an element's `size` is the larger of `scale` and the RMS of its row (the last dimension)
in the reference. An element's rounding error follows the size of the values it is computed
from, and where rows differ in size the row tells it better than the whole output: causal
attention over tiny_rows inputs has short rows averaging a few large values beside long ones
averaging to near zero, so the output's RMS is small, and a near-zero element of a short row
shows a bf16 P's rounding at many times `tol`: on an H200, FlashAttention, cuDNN and a
flash-style Triton kernel reached 2.4-6.3 tol against the output's RMS (which rejected the
Triton kernel beside libraries that drew 2.4), 0.9-2.0 tol against their rows'. A stale row or
a broken tail block is still off by about its row's own size.
    nonfinite NaN or Inf where the reference is finite (or a non-finite reference not matched):
              never allowed, whatever the envelope

The envelope of one shape and input distribution is, per statistic,

    bound = max(FLOOR, SLACK * reference's, min(CEILING, SLACK * worst passing library's))

with FLOOR and CEILING fixed multiples of the operator's per-dtype `tol` (the error per element
that rounding alone may reach; 2**-7 for bfloat16 outputs). The reference in the contract dtype
always sits inside its envelope; a library widens it only up to the ceiling, which a 1% bias
already exceeds. A library passes when it lies within the envelope of the reference and the
*other* passing libraries (so a kernel as good as it passes too); one that breaks a named
contract rule of its operator (``ContractRule``: a probe input on which the breach is glaring,
such as an intermediate stored in bfloat16) is excluded by that rule's name.

API (the judge, ``Operator.verify``, the benchmarks and the tests all use these):

    reference_outputs(op, inputs) -> tuple                     the float64 reference, kept in float32
    error_stats(out, ref, tol) -> Stats                        one tensor's statistics
    envelope(reference_stats, library_stats, tol, dtypes, rule) -> Envelope
    judge_output(out, ref, env, inputs=()) -> Judgement(ok, margin, message, stats)
    calibrate(op, inputs, ref=None, implementations={}, dtype=None)
        -> Calibration(envelope, verdicts {name: Verdict(status, margin, message, stats, rule)}, reference stats,
           seconds {name: wall seconds})

``margin`` is the kernel's worst statistic over its bound (<= 1 passes; inf for NaN, a wrong
structure or an operator rule's violation). An operator with its own rule (``Operator.rule``:
"topk" for tie-ambiguous indices) plugs in through ``RULES``; contractions need none, since
every statistic is relative to the output's scale. ``Envelope.as_dict()`` / ``from_dict`` make
the envelope cacheable as JSON; ``calibrate`` costs one call of each implementation and of the
reference in the contract dtype.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

if TYPE_CHECKING:
    from ablate.operators._operator import Operator

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
class Stats:
    """Error statistics of one output against the float64 reference (see the module docstring)."""

    n: int = 0
    nonfinite: int = 0
    scale: float = 1.0
    max_abs: float = 0.0
    rms: float = 0.0
    max: float = 0.0
    frac: float = 0.0
    problem: str = ""  # an operator rule's violation (a repeated top-k index): never passes

    def as_dict(self) -> dict:
        return asdict(self)


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


# -- statistics ------------------------------------------------------------------------------
CHUNK = 1 << 22  # elements per pass: bounded memory whatever the output's size


def _flat(t: Any) -> torch.Tensor:
    t = torch.as_tensor(t)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.reshape(-1)


def _wide(*ts: torch.Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype in (torch.float64, torch.int64, torch.int32) for t in ts) else torch.float32


def _scale(r: torch.Tensor, wide: torch.dtype) -> float:
    """RMS of the finite elements of a flat reference; 1 when all are zero (errors then absolute)."""
    acc = torch.zeros(2, dtype=torch.float64, device=r.device)
    for a in range(0, r.numel(), CHUNK):
        rc = r[a:a + CHUNK].to(wide)
        fin = torch.isfinite(rc)
        acc[0] += torch.where(fin, rc, 0).double().square().sum()
        acc[1] += fin.sum()
    sq, cnt = acc.tolist()
    return math.sqrt(sq / cnt) if cnt and sq > 0 else 1.0


def _rows(ref: Any) -> tuple[int, int]:
    """(elements per row, elements per pass) of a reference: rows are its last dimension when it
    has several of them, each short enough for one pass (0 otherwise: the output's scale alone),
    and a pass holds whole rows."""
    shape = tuple(torch.as_tensor(ref).shape)
    row = shape[-1] if len(shape) >= 2 and 1 < shape[-1] <= CHUNK and math.prod(shape) > shape[-1] else 0
    return row, (CHUNK // row * row if row else CHUNK)


def _size(rc: torch.Tensor, finite: torch.Tensor, scale: float, row: int) -> torch.Tensor:
    """Each element's |ref| + size, the max statistic's denominator (see the module docstring)."""
    mag = torch.where(finite, rc.abs(), 0)
    if not row:
        return mag + scale
    rows = mag.view(-1, row)
    rms = rows.double().square().mean(1, keepdim=True).sqrt().to(mag.dtype)
    return (rows + rms.clamp(min=scale)).view(-1)


def error_stats(out: Any, ref: Any, tol: float) -> Stats:
    """Statistics of one output (a tensor or number) against the float64 reference's."""
    o, r = _flat(out), _flat(ref)
    if o.numel() != r.numel():
        raise ValueError(f"{o.numel()} elements against a reference of {r.numel()}")
    n = r.numel()
    if n == 0:
        return Stats()
    wide = _wide(o, r)
    scale = _scale(r, wide)
    row, step = _rows(ref)
    part = torch.zeros(5, dtype=torch.float64, device=r.device)  # nonfinite, max_abs, sum q^2, max e, beyond
    for a in range(0, n, step):
        rc = r[a:a + step].to(wide)
        oc = o[a:a + step].to(device=r.device, dtype=wide)
        fr, fo = torch.isfinite(rc), torch.isfinite(oc)
        unmatched = ~fr & (oc != rc) & ~(torch.isnan(oc) & torch.isnan(rc))  # Inf where Inf, NaN where NaN
        part[0] += ((fr & ~fo) | unmatched).sum()
        d = torch.where(fr & fo, (oc - rc).abs(), 0)
        part[1] = torch.maximum(part[1], d.max().double())
        part[2] += (d / scale).double().square().sum()
        e = d / _size(rc, fr, scale, row)
        part[3] = torch.maximum(part[3], e.max().double())
        part[4] += (e > tol).sum()
    nonfinite, max_abs, sumsq, emax, beyond = part.tolist()
    return Stats(n=n, nonfinite=int(nonfinite), scale=scale, max_abs=max_abs, rms=math.sqrt(sumsq / n),
                 max=emax, frac=beyond / n)


def worst_element(out: Any, ref: Any) -> tuple[list[int], float, float]:
    """(index, got, expected) of the element farthest off relative to |ref| + size; a NaN or
    Inf where the reference is finite counts as farthest."""
    of, rf = _flat(out), _flat(ref)
    wide = _wide(of, rf)
    scale = _scale(rf, wide)
    row, step = _rows(ref)
    best, where = -1.0, 0
    for a in range(0, rf.numel(), step):
        rc = rf[a:a + step].to(wide)
        oc = of[a:a + step].to(device=rf.device, dtype=wide)
        e = ((oc - rc).abs() / _size(rc, torch.isfinite(rc), scale, row)).nan_to_num(nan=math.inf, posinf=math.inf)
        matched = (oc == rc) | (torch.isnan(oc) & torch.isnan(rc))  # a non-finite reference met exactly
        e = torch.where(~torch.isfinite(rc) & matched, 0, e)
        v, i = e.max(0)
        if float(v) > best:
            best, where = float(v), a + int(i)
    shape = tuple(torch.as_tensor(ref).shape)
    idx = [int(i) for i in torch.unravel_index(torch.tensor(where), shape)] if shape else []
    return idx, float(of[where]), float(rf[where])


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


def _dtype_name(t: Any) -> str:
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
        if dtype and _dtype_name(o) != dtype:
            return f"output {i}: dtype {_dtype_name(o)} != expected {dtype}"
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
    return next((_dtype_name(t) for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()), "float32")


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
    dtypes = tuple(_dtype_name(t) for t in mine)
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


__all__ = ["CHUNK", "RULES", "SLACK", "TOLERANCE", "UNIT", "Bounds", "Calibration", "ContractRule", "Envelope",
           "Judgement", "Rule", "Stats", "Verdict", "as_outputs", "breaks", "calibrate", "ceiling", "contract_dtype",
           "envelope", "error_stats", "floor", "judge_output", "margin", "reference_outputs", "structure_problem",
           "tolerance_of", "upcast", "worst_element"]
