"""operators/_fused_stats.py (the error pass a GPU runs) under Triton's CPU interpreter (a
process of its own: TRITON_INTERPRET must precede importing triton): the rule's error pass as two kernels gives the eager pass's counts
and maxima exactly and its float64 sums to the last bits, on outputs with NaN and Inf where the
reference has them and where it does not, with and without rows, in both wide dtypes. A GPU's
judge checks it against the eager pass on the first chunk of each kind and gives it up, said, where
it raises or disagrees (_error_stats.gpu_pass)."""
import json

import pytest
import torch

COMPARE = r'''
import json
import torch
from ablate.operators import _error_stats as es
from ablate.operators import _fused_stats as fs

out = []
for wide in (torch.float32, torch.float64):
    for row, tol in ((0, 5e-4), (1000, 5e-4), (37, 1e-3), (1000, 0.05)):
        g = torch.Generator().manual_seed(row + 1)
        n = 13 * (row or 1000)
        r = torch.randn(n, generator=g, dtype=torch.float64).to(wide)
        r[::7] *= 1e-3  # small elements beside large ones: the rows' sizes differ
        o = (r.double() * (1 + 1e-3 * torch.randn(n, generator=g, dtype=torch.float64))).to(wide)
        o[40:60] = 0  # a stale stretch: far beyond the tolerance
        o[5], o[17] = float("nan"), float("inf")  # non-finite where the reference is finite
        r[23], o[23] = float("inf"), float("inf")  # matched
        r[29], o[29] = float("nan"), 1.0  # not matched
        r[31], o[31] = float("-inf"), float("inf")  # not matched
        r[37], o[37] = float("nan"), float("nan")  # matched
        scale = torch.tensor(es._scale(r, wide, 1 << 22), dtype=torch.float64)
        t = torch.tensor(tol, dtype=torch.float64)
        out.append({"case": f"{wide} row={row} tol={tol}", "eager": es.chunk_stats(o, r, scale, t, row).tolist(),
                    "fused": fs.chunk_stats(o, r, scale, t, row).tolist()})
print(json.dumps(out))
'''


def test_the_fused_pass_gives_the_eager_pass_statistics(interpreted):
    done = interpreted(["-c", COMPARE])
    assert done.returncode == 0, done.stderr[-3000:]
    cases = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(cases) == 8
    for c in cases:
        (n_e, max_e, sq_e, emax_e, beyond_e), (n_f, max_f, sq_f, emax_f, beyond_f) = c["eager"], c["fused"]
        assert (n_f, max_f, emax_f, beyond_f) == (n_e, max_e, emax_e, beyond_e), c
        assert sq_f == pytest.approx(sq_e, rel=1e-13), c
        assert n_e == 4 and beyond_e >= 10  # the non-finite and stale elements were there to find


def _partials(wide=torch.float32, row=0):
    g = torch.Generator().manual_seed(3)
    r = torch.randn(4 * (row or 100), generator=g).to(wide)
    o = r + 1e-3 * torch.randn(r.shape, generator=g).to(wide)
    return o, r, torch.tensor(1.0, dtype=torch.float64), torch.tensor(5e-3, dtype=torch.float64), row


@pytest.fixture
def fresh_checks(monkeypatch):
    from ablate.operators import _error_stats as es

    monkeypatch.setattr(es, "CHECKED", {})
    monkeypatch.setattr(es, "GAVE_UP", {})
    return es


def test_the_gpu_pass_is_checked_once_a_kind_and_used_after(fresh_checks, monkeypatch):
    from ablate.operators import _fused_stats

    es, calls, eager = fresh_checks, [], []
    real = es.chunk_stats  # both stand-ins answer with it, counting their calls
    monkeypatch.setattr(_fused_stats, "chunk_stats", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(es, "chunk_stats", lambda *a: eager.append(1) or real(*a))
    args = _partials()
    first = es.gpu_pass(*args)
    assert torch.equal(first, real(*args)) and calls == [1] and eager == [1]  # checked against the eager pass
    es.gpu_pass(*args)
    assert calls == [1, 1] and eager == [1] and es.CHECKED == {("float32", False): True} and not es.GAVE_UP
    es.gpu_pass(*_partials(row=50))  # another kind: checked too
    assert eager == [1, 1] and es.CHECKED[("float32", True)] is True


@pytest.mark.parametrize("fused, says", [
    (lambda *a: (_ for _ in ()).throw(RuntimeError("no GPU for this")), "raised RuntimeError: no GPU for this"),
    (lambda o, r, s, t, row: torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64), "the Triton pass gave"),
])
def test_a_gpu_pass_that_raises_or_disagrees_is_given_up_for_the_eager_one(fresh_checks, monkeypatch, fused, says):
    """A wrong statistic cannot come of the Triton pass: where it fails or disagrees on its first
    chunk, the eager pass answers (then and after) and the reason is kept for the judge's flag."""
    from ablate.operators import _fused_stats

    es = fresh_checks
    monkeypatch.setattr(_fused_stats, "chunk_stats", fused)
    args = _partials()
    assert torch.equal(es.gpu_pass(*args), es.chunk_stats(*args))
    assert es.CHECKED == {("float32", False): False} and says in es.GAVE_UP["float32"]
    monkeypatch.setattr(_fused_stats, "chunk_stats", lambda *a: pytest.fail("given up: not called again"))
    assert torch.equal(es.gpu_pass(*args), es.chunk_stats(*args))


def test_two_passes_agree_on_counts_and_maxima_exactly_and_sums_to_their_last_bits():
    from ablate.operators._error_stats import agree

    a = torch.tensor([2.0, 0.5, 10.0, float("nan"), 3.0], dtype=torch.float64)
    assert agree(a, a.clone()) and agree(a, a + torch.tensor([0, 0, 1e-14, 0, 0], dtype=torch.float64))
    assert not agree(a, a + torch.tensor([0, 0, 1e-9, 0, 0], dtype=torch.float64))
    assert not agree(a, a + torch.tensor([1.0, 0, 0, 0, 0], dtype=torch.float64))  # a count
    assert not agree(a, torch.tensor([2.0, 0.5, 10.0, 1.0, 3.0], dtype=torch.float64))  # NaN against a number
