"""The one correctness rule (operators/_correctness.py): its statistics on hand-computed cases,
NaN and Inf, the envelope's floor, slack and ceiling, calibration against libraries (leave one
out, contract rules), and per operator family the biased kernels it rejects on the smoke shapes
and the honest ones (other reduction orders, bf16 P) it accepts (tests/operators/kernels/)."""
import math
import types
from pathlib import Path

import pytest
import torch

from ablate import operators
from ablate.operators import _correctness as c
from ablate.operators import _error_stats
from ablate.operators._operator import load_module

KERNELS = Path(__file__).parent / "kernels"
FAMILIES = {f: load_module(KERNELS / f"{f}.py", f"correctness_kernels_{f}")
            for f in ("row_reductions", "elementwise", "contractions")}
BF16_TOL = c.TOLERANCE["bfloat16"]


def _cases(kind):
    return [(op, name, fn) for mod in FAMILIES.values() for op, ks in getattr(mod, kind, {}).items()
            for name, fn in ks.items()]


def _judged(op, fn, shape, dist, seed):
    inputs = op.make_inputs(shape, seed, "cpu", dist)
    return op.verify(fn(*inputs), inputs)


# -- statistics ----------------------------------------------------------------------------------
def test_error_stats_on_a_hand_computed_case():
    ref = torch.tensor([3.0, 4.0, 0.0, -5.0])  # RMS = sqrt(50 / 4)
    out = torch.tensor([3.0, 5.0, 0.5, -5.0])
    s = c.error_stats(out, ref, tol=0.1)
    scale = math.sqrt(12.5)
    assert s.n == 4 and s.nonfinite == 0 and s.scale == pytest.approx(scale)
    assert s.max_abs == 1.0
    assert s.rms == pytest.approx(math.sqrt((1 + 0.25) / 4) / scale)
    # element 1: 1 / (4 + scale) = 0.133; element 2: 0.5 / (0 + scale) = 0.141, the worst
    assert s.max == pytest.approx(0.5 / scale)
    assert s.frac == 0.5  # both above 0.1
    assert c.error_stats(out, ref, tol=0.14).frac == 0.25 and c.error_stats(out, ref, tol=0.2).frac == 0.0


def test_error_stats_of_an_all_zero_reference_are_absolute():
    s = c.error_stats(torch.tensor([0.0, 1e-3]), torch.zeros(2), tol=1e-2)
    assert s.scale == 1.0 and s.max == pytest.approx(1e-3) and s.frac == 0.0


def test_error_stats_are_the_same_in_chunks(monkeypatch):
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(1000, generator=g) * 10
    out = (ref + torch.randn(1000, generator=g) * 0.01).to(torch.bfloat16)
    whole = c.error_stats(out, ref, BF16_TOL)
    monkeypatch.setattr(_error_stats, "CHUNK", 7)
    chunked = c.error_stats(out, ref, BF16_TOL)
    for k in ("n", "nonfinite", "max_abs", "frac"):
        assert getattr(chunked, k) == getattr(whole, k)
    for k in ("scale", "rms", "max"):
        assert getattr(chunked, k) == pytest.approx(getattr(whole, k), rel=1e-5)


def test_a_pass_of_another_size_than_the_row_bound_gives_the_same_statistics(monkeypatch):
    """A GPU's pass size (GPU_CHUNK) is not the row bound (CHUNK): rows are the rule's whatever
    the pass, and a pass shorter than a row still holds one whole row."""
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(64, 48, generator=g) * torch.logspace(-2, 2, 64).unsqueeze(1)
    out = (ref + torch.randn(64, 48, generator=g) * 0.01).to(torch.bfloat16)
    whole, worst = c.error_stats(out, ref, BF16_TOL), c.worst_element(out, ref)
    for size in (5, 100, 1 << 26):  # shorter than a row, a few rows a pass, all in one pass
        monkeypatch.setattr(_error_stats, "_chunk", lambda t: size)
        assert _error_stats._rows(ref, _error_stats._chunk(ref)) == (48, max(size // 48, 1) * 48)
        parted = c.error_stats(out, ref, BF16_TOL)
        assert (parted.n, parted.nonfinite, parted.max_abs, parted.frac) == (whole.n, whole.nonfinite, whole.max_abs, whole.frac)
        for k in ("scale", "rms", "max"):
            assert getattr(parted, k) == pytest.approx(getattr(whole, k), rel=1e-6)
        assert c.worst_element(out, ref) == worst


def test_a_gpus_pass_is_never_more_than_its_free_memory_holds(monkeypatch):
    """A device the problem nearly fills gets smaller passes, down to the CPU's, rather than the
    judge running out of memory: that would reject an honest kernel as `oom`."""
    on_gpu = types.SimpleNamespace(device=torch.device("cuda", 0))
    for free, size in ((80 << 30, _error_stats.GPU_CHUNK), (1 << 30, (1 << 30) // _error_stats.PASS_BYTES),
                       (1 << 20, _error_stats.CHUNK)):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 80 << 30))
        assert _error_stats._chunk(on_gpu) == size
    assert _error_stats._chunk(torch.zeros(1)) == _error_stats.CHUNK


def test_the_max_statistic_sizes_an_element_by_the_larger_of_its_row_and_the_output():
    ref = torch.tensor([[4.0, 0.0], [0.1, -0.1]])  # output RMS 2.0012; row RMS 2.828 and 0.1
    out = torch.tensor([[4.0, 0.3], [0.3, -0.1]])
    scale, big_row = math.sqrt(16.02 / 4), math.sqrt(8.0)
    s = c.error_stats(out, ref, tol=0.1)
    assert s.scale == pytest.approx(scale)
    # (0, 1): 0.3 / (0 + 2.828) = 0.106, sized by its row; (1, 0): 0.2 / (0.1 + 2.0012) = 0.095,
    # its row smaller than the output
    assert s.max == pytest.approx(0.3 / big_row)
    assert s.frac == 0.25  # only (0, 1) beyond 0.1
    # one row (or a flat tensor) is the output itself: sized by the output's RMS as before
    assert c.error_stats(out.reshape(-1), ref.reshape(-1), tol=0.1).max == pytest.approx(0.3 / scale)
    assert c.worst_element(out, ref) == ([0, 1], pytest.approx(0.3), 0.0)


def test_row_sized_statistics_are_the_same_in_chunks(monkeypatch):
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(40, 3, generator=g) * torch.logspace(-3, 1, 40)[:, None]
    out = (ref + torch.randn(40, 3, generator=g) * 0.01).to(torch.bfloat16)
    whole = c.error_stats(out, ref, BF16_TOL)
    monkeypatch.setattr(_error_stats, "CHUNK", 7)  # passes of two whole rows
    chunked = c.error_stats(out, ref, BF16_TOL)
    assert (chunked.n, chunked.frac) == (whole.n, whole.frac)
    assert chunked.max == pytest.approx(whole.max, rel=1e-6)


def test_a_flash_style_bf16_p_on_tiny_rows_is_sized_by_its_rows():
    """The H200's rejection of a flash-style Triton kernel (tiny_rows, S=8192), on the CPU: a bf16 P
    put a near-zero element of a short causal row at 4 tol of the output's small RMS, past the
    reference-only envelope's floor; sized by its row it is under 1 tol. A stale short row is still
    far off (a long row averages thousands of keys: the row before it is within rounding)."""
    op = operators.get("attention")
    shape = {"B": 1, "H": 1, "S": 4096, "D": 128, "dtype": "bfloat16"}
    inputs = op.make_inputs(shape, 5, "cpu", "tiny_rows")
    ref = c.reference_outputs(op, inputs)[0]
    out = FAMILIES["contractions"].flash_attention(*inputs, block=64)
    assert c.error_stats(out.reshape(-1), ref.reshape(-1), BF16_TOL).max > c.floor(BF16_TOL).max  # output-sized
    assert c.error_stats(out, ref, BF16_TOL).max < BF16_TOL
    assert op.verify(out, inputs).ok
    stale = out.clone()
    stale[0, 0, 20] = stale[0, 0, 19]  # one query's row left from the one before
    j = op.verify(stale, inputs)
    assert not j.ok and "max error" in j.message


def test_a_p_below_the_contracts_bf16_is_rejected_though_errors_are_row_sized():
    """Sizing an element by its row loosens the max statistic for large rows; a float8 P (what an
    agent would try next for speed) is still far outside on every smoke shape and distribution but
    `large`, whose scores make P one-hot (exact in any dtype)."""
    op = operators.get("attention")
    for shape in op.shapes["smoke"]:
        for seed, dist in enumerate(d for d in operators.DISTRIBUTIONS if d != "large"):
            j = _judged(op, FAMILIES["contractions"].attention_fp8_p, shape, dist, seed)
            assert not j.ok and j.margin > 5, (shape, dist, j.margin)


def test_nan_and_inf_never_pass_where_the_reference_is_finite():
    ref = torch.linspace(-3, 3, 100)
    env = c.Envelope(tol=1.0, bounds=(c.Bounds(1e9, 1e9, 1.0),), dtypes=("float32",))
    for bad in (float("nan"), float("inf"), -float("inf")):
        out = ref.clone()
        out[17] = bad
        j = c.judge_output(out, ref, env)
        assert not j.ok and math.isinf(j.margin) and j.stats[0].nonfinite == 1
        assert "NaN or Inf" in j.message and "[17]" in j.message


def test_a_non_finite_reference_must_be_matched():
    ref = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    assert c.error_stats(ref.clone(), ref, 0.0).nonfinite == 0  # NaN where NaN, Inf where Inf
    assert c.error_stats(torch.tensor([1.0, 0.0, float("inf"), float("inf")]), ref, 0.0).nonfinite == 2


def test_integer_outputs_must_be_exact():
    ref = torch.arange(10)
    env = c.envelope([c.error_stats(ref, ref, 0)], {}, 1e-2, ["int64"])
    assert env.bounds[0] == c.Bounds(0.0, 0.0, 0.0)
    assert c.judge_output(ref.clone(), ref, env).ok
    j = c.judge_output(ref + (ref == 4), ref, env)
    assert not j.ok and "1 of 10 elements differ" in j.message


def test_structure_is_checked_first():
    ref = torch.ones(4, 4)
    env = c.Envelope(tol=1.0, bounds=(c.Bounds(1, 1, 1),), dtypes=("bfloat16",))
    assert "shape" in c.judge_output(torch.ones(4, 5, dtype=torch.bfloat16), ref, env).message
    assert "dtype" in c.judge_output(torch.ones(4, 4), ref, env).message
    assert "output(s)" in c.judge_output((ref, ref), ref, env).message
    assert "tensor" in c.judge_output([[1.0]], ref, env).message


# -- envelopes -----------------------------------------------------------------------------------
def _stats(rms=0.0, mx=0.0, frac=0.0):
    return c.Stats(n=1000, rms=rms, max=mx, frac=frac)


def test_envelope_floor_slack_and_ceiling():
    tol = 0.01
    lo, hi = c.floor(tol), c.ceiling(tol)
    # the reference alone, below the floor: the floor
    env = c.envelope([_stats(rms=1e-4)], {}, tol, ["bfloat16"])
    assert env.bounds[0] == lo and env.members == ("reference",)
    # the reference above the floor: its stats times the slack (it always passes itself)
    env = c.envelope([_stats(rms=0.02)], {}, tol, ["bfloat16"])
    assert env.bounds[0].rms == pytest.approx(c.SLACK * 0.02)
    # a library widens the envelope up to the ceiling, never past it
    env = c.envelope([_stats()], {"lib": [_stats(rms=0.6 * lo.rms * 2, mx=1.0)]}, tol, ["bfloat16"])
    assert env.bounds[0].rms == pytest.approx(min(hi.rms, c.SLACK * 1.2 * lo.rms))
    assert env.bounds[0].max == hi.max and env.members == ("reference", "lib")


def test_envelope_round_trips_through_json():
    env = c.envelope([_stats(rms=1e-3)], {"a": [_stats(mx=0.02)]}, BF16_TOL, ["bfloat16"])
    assert c.Envelope.from_dict(env.as_dict()) == env


def test_a_one_percent_bias_exceeds_every_envelope_bf16_allows():
    """Whatever the libraries show, the ceiling keeps a 1% bias out: its rms error is 1%."""
    assert c.ceiling(BF16_TOL).rms < 0.01 / 1.2


# -- calibration ---------------------------------------------------------------------------------
def test_calibrate_without_libraries_is_the_reference_alone():
    op = operators.get("rmsnorm")
    inputs = op.make_inputs(op.shapes["smoke"][1], 0, "cpu", "normal")
    cal = c.calibrate(op, inputs)
    assert cal.verdicts == {} and cal.envelope.members == ("reference",)
    assert cal.envelope.bounds[0] == c.envelope(cal.reference, {}, BF16_TOL, ["bfloat16"]).bounds[0]
    assert cal.reference[0].rms < 0.5 * cal.envelope.bounds[0].rms  # one rounding: well inside


def test_calibrate_verdicts_leave_one_out():
    """A library passes when the envelope of the reference and the other libraries holds it; an
    outlier fails and does not widen the envelope a kernel is judged by."""
    op = operators.get("rmsnorm")
    rr = FAMILIES["row_reductions"]
    inputs = op.make_inputs(op.shapes["smoke"][1], 0, "cpu", "uniform")
    impls = {"chunked": rr.rmsnorm_chunked, "double_rounding": rr.rmsnorm_double_rounding,
             "biased": rr.rmsnorm_bias, "raises": lambda x, w: 1 / 0, "wrong_dtype": lambda x, w: x.float()}
    cal = c.calibrate(op, inputs, implementations=impls)
    v = cal.verdicts
    assert list(v) == list(impls)
    assert v["chunked"].status == "pass" and v["double_rounding"].status == "pass"
    assert v["biased"].status == "fail" and v["biased"].margin > 1 and "rms error" in v["biased"].message
    assert v["raises"].status == "error" and "ZeroDivisionError" in v["raises"].message
    assert v["wrong_dtype"].status == "error" and "dtype" in v["wrong_dtype"].message
    assert cal.envelope.members == ("reference", "chunked", "double_rounding")
    assert set(cal.seconds) == set(impls) and all(t >= 0 for t in cal.seconds.values())  # where a cold setup goes
    slow = c.calibrate(op, inputs, implementations={"slow": lambda x, w: __import__("time").sleep(0.2) or x})
    assert slow.seconds["slow"] >= 0.2 and slow.verdicts["slow"].status == "fail"  # timed whatever its verdict
    # the biased library, alone against the reference, still fails: it never widens anything
    assert c.calibrate(op, inputs, implementations={"biased": rr.rmsnorm_bias}).verdicts["biased"].status == "fail"


@pytest.mark.parametrize("name,kernel,rule", [
    ("cross_entropy", "cross_entropy_bf16_rows", "float32_row_losses"),
    ("rope", "rope_bf16_rotation", "float32_rotation"),
])
def test_contract_rules_exclude_a_library_by_name(name, kernel, rule):
    """Liger's cross-entropy (bf16 per-row losses) and RoPE (bf16 rotation) err too little on
    random inputs to fail the envelope reliably; their rule's probe names the breach."""
    op = operators.get(name)
    fn = getattr(FAMILIES["row_reductions" if name == "cross_entropy" else "elementwise"], kernel)
    for shape in op.shapes["smoke"]:
        inputs = op.make_inputs(shape, 0, "cpu", "normal")
        cal = c.calibrate(op, inputs, implementations={"breaks": fn, "eager": op.reference})
        assert cal.verdicts["eager"].status == "pass"
        v = cal.verdicts["breaks"]
        assert v.status == "excluded" and v.rule == rule and rule in v.message, v
        assert "breaks" not in cal.envelope.members


@pytest.mark.parametrize("name", [n for n in operators.REGISTRY if operators.get(n).contract_rules])
def test_every_reference_keeps_its_contract_rules(name):
    op = operators.get(name)
    for shape in op.shapes["smoke"]:
        for seed, dist in enumerate(operators.DISTRIBUTIONS):
            inputs = op.make_inputs(shape, seed, "cpu", dist)
            for rule in op.contract_rules:
                assert c.breaks(rule, op, op.reference, inputs) == "", (rule.name, shape, dist)
                probe = rule.probe(inputs)
                assert [t.shape for t in probe if isinstance(t, torch.Tensor)] == \
                    [t.shape for t in inputs if isinstance(t, torch.Tensor)]


# -- the rule on every operator family -----------------------------------------------------------
@pytest.mark.parametrize("op_name,name,fn", _cases("BIASED"), ids=lambda x: x if isinstance(x, str) else "")
def test_biased_kernel_is_rejected_on_the_smoke_shapes(op_name, name, fn):
    op = operators.get(op_name)
    judged = {(i, dist): _judged(op, fn, shape, dist, seed) for i, shape in enumerate(op.shapes["smoke"])
              for seed, dist in enumerate(operators.DISTRIBUTIONS)}
    if name == "bias":  # a 1% bias: on every shape and every distribution
        assert all(not j.ok for j in judged.values()), {k: j.margin for k, j in judged.items() if j.ok}
    else:
        assert any(not j.ok for j in judged.values())
    assert all(j.message for j in judged.values() if not j.ok)


@pytest.mark.parametrize("op_name,name,fn", _cases("HONEST"), ids=lambda x: x if isinstance(x, str) else "")
def test_honest_kernel_with_another_order_is_accepted(op_name, name, fn):
    op = operators.get(op_name)
    for shape in op.shapes["smoke"]:
        for seed, dist in enumerate(operators.DISTRIBUTIONS):
            j = _judged(op, fn, shape, dist, seed)
            assert j.ok and j.margin < 0.8, f"{shape} {dist}: {j.message or j.margin}"


@pytest.mark.parametrize("op_name,name,fn", _cases("EPSILON"), ids=lambda x: x if isinstance(x, str) else "")
def test_a_dropped_or_wrong_epsilon_fails_on_tiny_rows_only(op_name, name, fn):
    op = operators.get(op_name)
    for shape in op.shapes["smoke"]:
        assert _judged(op, fn, shape, "normal", 0).ok
        j = _judged(op, fn, shape, "tiny_rows", 0)
        assert not j.ok and j.margin > 10, j


def test_the_padded_width_rmsnorm_of_the_issue_is_rejected():
    """Dividing by 1024 instead of N=1000: 1.2% off on every element, inside the old rtol 1.6%."""
    op = operators.get("rmsnorm")
    shape = {"M": 5, "N": 1000, "dtype": "bfloat16"}
    j = _judged(op, FAMILIES["row_reductions"].rmsnorm_pow2, shape, "normal", 0)
    assert not j.ok and j.margin > 2 and "rms error" in j.message


def test_bf16_p_attention_passes_beside_a_library_with_the_same_rounding():
    """The CPU's SDPA keeps P in bf16 too: as a calibration member it passes, and so does a
    flash-style kernel against the envelope it sets."""
    op = operators.get("attention")
    shape = {"B": 1, "H": 2, "S": 256, "D": 64, "dtype": "bfloat16"}
    for seed, dist in enumerate(operators.DISTRIBUTIONS):
        inputs = op.make_inputs(shape, seed, "cpu", dist)
        cal = c.calibrate(op, inputs, implementations={"sdpa": op.baselines["torch_F.sdpa"].fn})
        assert cal.verdicts["sdpa"].status == "pass", (dist, cal.verdicts["sdpa"])
        kernel = FAMILIES["contractions"].attention_bf16_p(*inputs)
        assert op.verify(kernel, inputs, envelope=cal.envelope).ok, dist


def test_softmax_rejects_an_all_zero_output():
    op = operators.get("softmax")
    inputs = op.make_inputs({"M": 4, "N": 3000, "dtype": "bfloat16"}, 0, "cpu", "normal")
    assert op.verify(op.reference(*inputs), inputs).ok
    assert not op.verify(torch.zeros_like(inputs[0]), inputs).ok


def test_cross_entropy_rejects_a_bf16_rounded_loss():
    op = operators.get("cross_entropy")
    inputs = op.make_inputs({"M": 64, "V": 3000, "dtype": "bfloat16"}, 0, "cpu", "normal")
    loss = op.reference(*inputs)
    assert op.verify(loss, inputs).ok
    assert not op.verify(loss.to(torch.bfloat16).float(), inputs).ok


def test_verify_refuses_a_reference_in_the_contract_dtype():
    op = operators.get("rmsnorm")
    inputs = op.make_inputs(op.shapes["smoke"][0], 0, "cpu", "normal")
    with pytest.raises(ValueError, match="float64 reference"):
        op.verify(op.reference(*inputs), inputs, op.reference(*inputs))


def _topk_case():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0], [5.0, 4.0, 4.0, 2.0, 1.0]], dtype=torch.bfloat16)
    return (x, 2), torch.topk(x, 2)


def test_topk_accepts_any_tied_index():
    op = operators.get("topk")
    inputs, (values, _) = _topk_case()
    for idx in ([[1, 2], [0, 1]], [[4, 1], [0, 2]], [[2, 4], [0, 1]]):
        j = op.verify((values, torch.tensor(idx)), inputs)
        assert j.ok, j.message


def test_topk_rejects_wrong_answers():
    op = operators.get("topk")
    inputs, (values, indices) = _topk_case()
    cases = {
        "repeats": (values, torch.tensor([[1, 1], [0, 1]])),
        "differs from the returned values": (values, torch.tensor([[1, 3], [0, 1]])),
        "outside": (values, torch.tensor([[1, 9], [0, 1]])),
        "descending": (values.flip(1), indices.flip(1)),
        "dtype": (values, indices.int()),
        "shape": (values[:, :1], indices[:, :1]),
        "output(s)": (values,),
    }
    for why, out in cases.items():
        j = op.verify(out, inputs)
        assert not j.ok and why in j.message, (why, j.message)


def test_topk_all_zero_rows_tie_everywhere():
    """tiny_rows gives rows of zeros: every distinct set of k indices is right there."""
    op = operators.get("topk")
    x = torch.zeros(3, 40, dtype=torch.bfloat16)
    idx = torch.stack([torch.randperm(40, generator=torch.Generator().manual_seed(i))[:5] for i in range(3)])
    assert op.verify((torch.zeros(3, 5, dtype=torch.bfloat16), idx), (x, 5)).ok
