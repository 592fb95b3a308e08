"""The judge's use of the correctness rule on a timed call: the envelope widened for the call's
own inputs is computed only when the calibrated one fails the outputs, with the same verdict."""
import pytest
import torch

from ablate import operators
from ablate.evaluate import _correctness
from ablate.operators import _correctness as rule

SHAPE = {"M": 64, "N": 512, "dtype": "bfloat16"}


@pytest.fixture(scope="module")
def case():
    op = operators.get("rmsnorm")
    calibrated = op.make_inputs(SHAPE, 1, "cpu", "normal")
    env = rule.calibrate(op, tuple(calibrated), None, {}).envelope
    ins = op.make_inputs(SHAPE, 2, "cpu", "normal")
    return op, env, ins, list(_correctness.reference_outputs(op, ins))


def _outputs(op, ins, bias: float):
    (out,) = rule.as_outputs(op.reference(*ins))
    return [(out.float() * (1 + bias)).to(out.dtype)]


def _narrowed(env: rule.Envelope, by: float) -> rule.Envelope:
    bounds = tuple(rule.Bounds(b.rms * by, b.max * by, b.frac * by) for b in env.bounds)
    return rule.Envelope(env.tol, bounds, env.dtypes, env.members, env.rule)


@pytest.mark.parametrize("bias", [0.0, 0.002, 0.01, 0.05])
@pytest.mark.parametrize("by", [1.0, 0.5, 0.05])
def test_the_lazy_widening_gives_the_verdict_the_widened_envelope_gives(case, bias, by):
    op, env, ins, refs = case
    env = _narrowed(env, by)  # a calibration narrower than these inputs' own rounding: widening decides
    outs = _outputs(op, ins, bias)
    eager = _correctness.judge_set(op, outs, refs, ins, _correctness.for_input(op, ins, refs, env))[0]
    assert bool(_correctness.judge_own_input(op, outs, refs, ins, env)) == bool(eager)


def test_the_widening_is_computed_only_when_the_calibrated_envelope_fails(case, monkeypatch):
    op, env, ins, refs = case
    widened = []
    real = _correctness.for_input
    monkeypatch.setattr(_correctness, "for_input", lambda *a: widened.append(1) or real(*a))
    assert _correctness.judge_own_input(op, _outputs(op, ins, 0.0), refs, ins, env) == {}
    assert widened == []
    # the contract-dtype reference on these inputs, within a calibration that allows no error at
    # all: it fails that, passes once widened by its own rounding
    assert _correctness.judge_own_input(op, _outputs(op, ins, 0.0), refs, ins, _narrowed(env, 0.0)) == {}
    assert widened == [1]
    assert "incorrect" in _correctness.judge_own_input(op, _outputs(op, ins, 0.05), refs, ins, env)
    assert torch.is_tensor(refs[0])


def test_a_cached_envelope_draws_no_inputs(tmp_path, monkeypatch):
    """A judge's first evaluation spent seconds drawing inputs and float64 references for envelopes
    it then read from the cache: they are drawn only when the envelope is calibrated."""
    from types import SimpleNamespace

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    op = operators.get("rmsnorm")
    ev = SimpleNamespace(op=op, device="cpu", info={"name": "cpu", "driver": ""}, libs={}, op_hash="h",
                         note=lambda m: None,
                         unavailable={name: "needs CUDA" if b.needs_cuda else None for name, b in op.baselines.items()})
    drawn = []

    def draw():
        drawn.append(1)
        ins = op.make_inputs(SHAPE, 1, "cpu", "normal")
        return ins, list(_correctness.reference_outputs(op, ins))

    def call(name, *ins):  # the library in this process (the judge calls it in its library process)
        return op.baselines[name].fn(*ins)

    first = _correctness.calibration(ev, SHAPE, "normal", draw, call)
    assert drawn == [1] and set(first["verdicts"]) == {n for n, why in ev.unavailable.items() if why is None}
    again = _correctness.calibration(ev, SHAPE, "normal", draw, call)
    assert drawn == [1] and again["envelope"] == first["envelope"]
