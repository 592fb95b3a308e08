"""The estimator, its interval, the tests and the power calculation: against scipy, hand-computed
cases, closed forms, and coverage on simulated studies with a known true ratio."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from analysis import stats


def test_one_operator_is_the_paired_t_interval_of_scipy():
    rng = np.random.default_rng(1)
    arm, base = np.exp(rng.normal(0.2, 0.3, 7)), np.exp(rng.normal(0.0, 0.3, 7))
    e = stats.estimate(["op"] * 7, np.log(arm) - np.log(base))
    ci = sps.ttest_rel(np.log(arm), np.log(base)).confidence_interval()
    assert (math.log(e.ci_low), math.log(e.ci_high)) == pytest.approx((ci.low, ci.high))
    assert e.estimate == pytest.approx(sps.gmean(arm / base))


def test_several_operators_hand_computed():
    # op a: logs 1, 3 (mean 2, s^2 2); op b: logs 0, 0, 3 (mean 1, s^2 3). Estimate exp(1.5).
    # se^2 = (2/2 + 3/3) / 4 = 0.5; df = (1 + 1)^2 / (1^2/1 + 1^2/2) = 8/3
    e = stats.estimate(["a", "a", "b", "b", "b"], [1, 3, 0, 0, 3])
    se, df = math.sqrt(0.5), 8 / 3
    t = sps.t.ppf(0.975, df)
    assert e.estimate == pytest.approx(math.exp(1.5)) and e.df == pytest.approx(df)
    assert (e.ci_low, e.ci_high) == pytest.approx((math.exp(1.5 - t * se), math.exp(1.5 + t * se)))


def test_an_operator_with_one_seed_pools_the_others_spread():
    # op a: logs 1, 3 (s^2 2, df 1); op b: one seed. se^2 = 2 * (1/2 + 1) / 4
    e = stats.estimate(["a", "a", "b"], [1, 3, 0])
    se = math.sqrt(2 * 1.5 / 4)
    assert e.df == 1 and math.log(e.ci_high) == pytest.approx(1.0 + sps.t.ppf(0.975, 1) * se)


def test_no_interval_without_a_repeated_seed():
    e = stats.estimate(["a", "b"], [0.1, 0.3])
    assert e.estimate == pytest.approx(math.exp(0.2)) and math.isnan(e.ci_low)


def test_vectorised_estimator_equals_the_plain_one():
    x = np.random.default_rng(2).normal(size=(3, 4, 5))
    est, lo, hi = stats.estimate_many(x)
    for i in range(3):
        e = stats.estimate(np.repeat(np.arange(4), 5), x[i].ravel())
        assert (est[i], lo[i], hi[i]) == pytest.approx((e.estimate, e.ci_low, e.ci_high))


def simulate(studies, operators, seeds, rng):
    """Studies with a known true ratio: per operator a true log-ratio and its own spread."""
    mu = rng.normal(0.1, 0.2, (studies, operators))
    sd = np.exp(rng.uniform(np.log(0.05), np.log(0.4), (studies, operators)))
    x = mu[..., None] + sd[..., None] * rng.normal(size=(studies, operators, seeds))
    return x, np.exp(mu.mean(axis=1))


@pytest.mark.parametrize("operators,seeds", [(10, 5), (3, 3), (1, 10)])
def test_the_95_interval_covers_the_true_ratio_in_93_to_97_percent_of_1000_studies(operators, seeds):
    x, true = simulate(1000, operators, seeds, np.random.default_rng(operators * 100 + seeds))
    _, lo, hi = stats.estimate_many(x)
    coverage = float(((lo <= true) & (true <= hi)).mean())
    assert 0.93 <= coverage <= 0.97, coverage


def test_wilcoxon_is_scipys_and_drops_exact_ties():
    x = np.log([1.2, 0.9, 1.5, 1.3, 1.0, 1.1, 1.4])
    assert stats.wilcoxon(x) == pytest.approx(sps.wilcoxon(x[x != 0]).pvalue)
    assert math.isnan(stats.wilcoxon([0.0, 0.0, 0.1]))


def test_win_tie_loss_with_the_tie_band():
    x = np.log([1.06, 1.04, 1.0, 0.96, 0.94, 2.0])
    assert stats.win_tie_loss(x) == (2, 3, 1)
    assert stats.win_tie_loss(x, band=0.01) == (3, 1, 2)


def test_mde_closed_form_for_many_seeds():
    # With large df the t quantiles are the normal ones: MDE = exp((z_.975 + z_.8) * sd / sqrt(K n)).
    sd, k, n = 0.2, 10, 2000
    closed = math.exp((sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) * sd / math.sqrt(k * n))
    assert stats.mde(sd, k, n) == pytest.approx(closed, rel=1e-4)


def test_mde_has_the_stated_power_under_the_noncentral_t():
    for sd, k, n in [(0.2, 10, 5), (0.1, 3, 3), (0.3, 1, 8)]:
        assert stats.power_at(stats.mde(sd, k, n), sd, k, n) == pytest.approx(0.8, abs=0.02)


def test_seeds_needed_matches_the_closed_form():
    sd, k, effect = 0.1, 10, 1.05
    closed = ((sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) * sd / math.log(effect)) ** 2 / k  # seeds per operator
    n = stats.seeds_needed(effect, sd, k)
    assert math.ceil(closed) <= n <= math.ceil(closed) + 1  # t quantiles ask a little more
    assert stats.mde(sd, k, n) <= effect < stats.mde(sd, k, n - 1)


def test_sol_score_is_half_at_the_library_and_one_at_speed_of_light():
    q = 0.6  # the library runs at 60% of speed-of-light
    assert stats.sol_score(1.0, q) == pytest.approx(0.5)
    assert stats.sol_score(1 / q, q) == pytest.approx(1.0)
    # from times: T_b = 1, T_SOL = 0.6, T_k = 0.8 -> S = 1 / (1 + 0.2 / 0.4)
    assert stats.sol_score(1 / 0.8, q) == pytest.approx(1 / 1.5)
