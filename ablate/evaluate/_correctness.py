"""Correctness, in the judge: the one rule (operators/_correctness.py) applied to what the
candidate sent. Per shape and input distribution, the envelope is calibrated once, from the
reference in the contract dtype and every available library on the same inputs, before any
submitted code runs, and cached with the baseline times; every input set's outputs are then
judged against the float64 reference within it. A library that does not pass the calibration is
never a shape's best library."""
from __future__ import annotations

import functools
import json
import math

import torch

from ablate.operators import _correctness as rule

_Tensor = torch.Tensor
reference_outputs = rule.reference_outputs
as_outputs = rule.as_outputs


def expected(op, ins) -> list[tuple[list[int] | None, str | None]]:
    """Output shapes and dtypes of the contract: the reference on the original dtypes."""
    return [(list(t.shape), str(t.dtype).removeprefix("torch.")) if isinstance(t, _Tensor) else (None, None)
            for t in as_outputs(op.reference(*ins))]


def output_bytes(exp) -> int:
    return sum(math.prod(shape) * getattr(torch, dtype).itemsize for shape, dtype in exp if shape is not None)


def calibration(ev, shape: dict, dist: str, draw, call) -> dict:
    """{"envelope", "verdicts", "reference"} of one shape and distribution (cached). draw() ->
    (inputs, float64 references) of the distribution's first set: drawn only when not cached (a
    judge's first evaluation otherwise spent seconds on inputs and references it never used).
    call(name, *inputs) -> a library's outputs (_baselines.LibraryCalls: in the library process)."""
    from ablate.evaluate import _cache
    from ablate.operators import shape_id

    impls = {name: functools.partial(call, name) for name in ev.op.baselines if ev.unavailable[name] is None}
    key = "|".join([ev.info["name"], str(ev.info["driver"]), json.dumps(ev.libs, sort_keys=True), ev.op.name,
                    ev.op_hash, shape_id(shape), dist, ",".join(sorted(impls)), f"envelope-v{rule.EDITION}"])
    found = _cache.get("envelopes", key)
    if found is None:
        if impls and ev.device == "cuda":
            ev.note(f"{shape_id(shape)} {dist}: calibrating the correctness envelope on {len(impls)} libraries "
                    "(once per GPU and versions, then cached)")
        ins, refs = draw()
        cal = rule.calibrate(ev.op, tuple(ins), list(refs), impls, dtype=shape.get("dtype"))
        del ins, refs
        found = {"envelope": cal.envelope.as_dict(), "verdicts": {k: v.as_dict() for k, v in cal.verdicts.items()},
                 "reference": [s.as_dict() for s in cal.reference], "seconds": cal.seconds}
        _cache.put("envelopes", key, found)
        if cal.seconds and ev.device == "cuda":  # where a cold setup goes: compiles, mostly
            slow = sorted(cal.seconds.items(), key=lambda kv: -kv[1])[:3]
            ev.note(f"{shape_id(shape)} {dist}: calibrated in {sum(cal.seconds.values()):.1f} s ("
                    + ", ".join(f"{k} {v:.1f} s" for k, v in slow) + ")")
    return found


def interpreted(env: rule.Envelope) -> rule.Envelope:
    """The envelope for Triton's CPU interpreter, which converts to bfloat16 and float16 by
    truncation (round toward zero) where a GPU rounds to nearest: an honest kernel's rounding
    error is about twice a GPU's, so the rms bound is at least the ceiling's (which a 1% bias
    still exceeds)."""
    lift = rule.ceiling(env.tol).rms
    bounds = tuple(rule.Bounds(max(b.rms, lift) if d in ("bfloat16", "float16") else b.rms, b.max, b.frac)
                   for b, d in zip(env.bounds, env.dtypes))
    return rule.Envelope(env.tol, bounds, env.dtypes, env.members, env.rule)


def for_input(op, ins, refs, env: rule.Envelope) -> rule.Envelope:
    """`env` widened by what the reference in the contract dtype shows on these very inputs. A
    timed call's input has one element moved (possibly a large value into a row of tiny ones), so
    its own rounding can exceed what the calibration draw showed."""
    own = rule.calibrate(op, tuple(ins), list(refs), {}).envelope
    bounds = tuple(rule.Bounds(max(a.rms, b.rms), max(a.max, b.max), max(a.frac, b.frac))
                   for a, b in zip(env.bounds, own.bounds))
    return rule.Envelope(env.tol, bounds, env.dtypes, env.members, env.rule)


def judge_own_input(op, outs: list, refs, ins, env: rule.Envelope) -> dict[str, str]:
    """Failures of a timed call's outputs, judged within `env` widened for its own inputs
    (for_input). The widening is computed only when `env` alone fails them: it never narrows a
    bound and a margin only falls as its bound grows, so a pass within `env` is a pass within the
    widened one, and the verdict is the same for the price of one reference less a call."""
    failures = judge_set(op, outs, refs, ins, env)[0]
    return judge_set(op, outs, refs, ins, for_input(op, ins, refs, env))[0] if failures else failures


def judge_set(op, outs: list, refs, ins, env: rule.Envelope) -> tuple[dict[str, str], rule.Judgement]:
    """Failures {reason: message} of one input set's outputs, and the rule's judgement."""
    j = rule.judge_output(outs, refs, env, tuple(ins))
    return ({} if j.ok else {"incorrect": j.message}), j


def margin_row(worst: rule.Judgement | None, env: dict | None) -> dict:
    """What a shape's result shows of its closest call: the kernel's error statistics beside the
    envelope's bounds (margin <= 1 passes)."""
    if worst is None or env is None:
        return {"margin": None, "error_stats": None, "envelope": None}
    return {"margin": _finite(worst.margin), "error_stats": [_finite_dict(s.as_dict()) for s in worst.stats],
            "envelope": {"bounds": env["bounds"], "members": env["members"], "tol": env["tol"]}}


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def _finite_dict(d: dict) -> dict:
    return {k: _finite(v) for k, v in d.items()}
