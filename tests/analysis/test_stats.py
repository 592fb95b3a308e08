"""The estimator, its two intervals, their tests, Holm's adjustment and the planning: against
scipy, hand-computed cases, closed forms, and coverage on simulated studies with a known truth."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from ablate.analysis import stats
from benchmarks.analysis_coverage import familywise, simulate


def test_one_operator_is_the_paired_t_interval_of_scipy():
    rng = np.random.default_rng(1)
    arm, base = np.exp(rng.normal(0.2, 0.3, 7)), np.exp(rng.normal(0.0, 0.3, 7))
    e = stats.estimate(["op"] * 7, np.log(arm) - np.log(base))
    test = sps.ttest_rel(np.log(arm), np.log(base))
    ci = test.confidence_interval()
    assert (math.log(e.these.low), math.log(e.these.high)) == pytest.approx((ci.low, ci.high))
    assert e.these.p == pytest.approx(test.pvalue)
    assert e.estimate == pytest.approx(sps.gmean(arm / base))
    assert math.isnan(e.like.low) and e.like.why == "one operator"  # nothing to say of other operators


def test_several_operators_hand_computed():
    # op a: logs 1, 3 (mean 2, s^2 2); op b: logs 0, 0, 3 (mean 1, s^2 3). Estimate exp(1.5).
    # these operators: se^2 = (2/2 + 3/3) / 4 = 0.5; df = (1 + 1)^2 / (1^2/1 + 1^2/2) = 8/3
    # operators like these: the means 2 and 1, se^2 = var(2, 1) / 2 = 0.25, df = 1
    e = stats.estimate(["a", "a", "b", "b", "b"], [1, 3, 0, 0, 3])
    se, df = math.sqrt(0.5), 8 / 3
    t = sps.t.ppf(0.975, df)
    assert e.estimate == pytest.approx(math.exp(1.5))
    assert (e.these.low, e.these.high) == pytest.approx((math.exp(1.5 - t * se), math.exp(1.5 + t * se)))
    assert e.these.p == pytest.approx(2 * sps.t.sf(1.5 / se, df))
    t1 = sps.t.ppf(0.975, 1)
    assert (e.like.low, e.like.high) == pytest.approx((math.exp(1.5 - t1 * 0.5), math.exp(1.5 + t1 * 0.5)))
    # the spread between operators by moments: var(means) 0.5 minus the seeds' share (1 + 1) / 2 -> 0
    assert e.tau == 0.0


def test_the_operators_like_these_interval_is_scipys_t_interval_on_the_per_operator_means():
    rng = np.random.default_rng(3)
    groups = np.repeat(list("abcde"), [2, 3, 4, 3, 2])
    x = rng.normal(0.1, 0.3, len(groups))
    means = np.array([x[groups == g].mean() for g in "abcde"])
    ci = sps.ttest_1samp(means, 0).confidence_interval()
    e = stats.estimate(groups, x)
    assert (math.log(e.like.low), math.log(e.like.high)) == pytest.approx((ci.low, ci.high))
    assert e.like.p == pytest.approx(sps.ttest_1samp(means, 0).pvalue)


def test_an_operator_with_one_seed_pools_the_others_spread():
    # op a: logs 1, 3 (s^2 2, df 1); op b: one seed. se^2 = 2 * (1/2 + 1) / 4
    e = stats.estimate(["a", "a", "b"], [1, 3, 0])
    se = math.sqrt(2 * 1.5 / 4)
    assert math.log(e.these.high) == pytest.approx(1.0 + sps.t.ppf(0.975, 1) * se)


def test_two_operators_one_seed_each_no_interval_over_these_operators_no_p_value():
    e = stats.estimate(["a", "b"], [0.1, 0.3])
    assert e.estimate == pytest.approx(math.exp(0.2))
    assert math.isnan(e.these.low) and math.isnan(e.these.p) and e.these.why == "one seed per operator"
    t1 = sps.t.ppf(0.975, 1)  # operators like these: two means, one degree of freedom
    assert math.log(e.like.high) == pytest.approx(0.2 + t1 * 0.1)


def test_a_zero_width_interval_is_not_computable_and_says_why():
    e = stats.estimate(["a", "a", "b", "b"], [0.0, 0.0, 0.0, 0.0])  # e.g. every pair 1.0x
    assert e.estimate == 1.0
    assert math.isnan(e.these.low) and e.these.why.startswith("zero width")
    assert math.isnan(e.like.low) and e.like.why.startswith("zero width") and math.isnan(e.like.p)
    assert stats.estimate([], [], empty="no pair where both were accepted").these.why == "no pair where both were accepted"


def test_vectorised_estimator_equals_the_plain_one():
    x = np.random.default_rng(2).normal(size=(3, 4, 5))
    many = stats.estimate_many(x)
    for i in range(3):
        e = stats.estimate(np.repeat(np.arange(4), 5), x[i].ravel())
        assert many["estimate"][i] == pytest.approx(e.estimate)
        assert (many["these_low"][i], many["these_high"][i], many["these_p"][i]) == pytest.approx((e.these.low, e.these.high, e.these.p))
        assert (many["like_low"][i], many["like_high"][i], many["like_p"][i]) == pytest.approx((e.like.low, e.like.high, e.like.p))


@pytest.mark.parametrize("operators,seeds,tau", [(10, 5, 0.2), (10, 3, 0.2), (3, 3, 0.2), (2, 3, 0.2), (10, 3, 0.05)])
def test_each_interval_covers_its_own_target_in_93_to_97_percent_of_1000_studies(operators, seeds, tau):
    x, these_truth, general = simulate(1000, operators, seeds, tau, np.random.default_rng(operators * 100 + seeds))
    r = stats.estimate_many(x)
    these = float(((r["these_low"] <= these_truth) & (these_truth <= r["these_high"])).mean())
    like = float(((r["like_low"] <= general) & (general <= r["like_high"])).mean())
    assert 0.93 <= these <= 0.97, these
    assert 0.93 <= like <= 0.97, like
    if tau >= 0.2:  # the fixed-operator interval does not answer the general question
        assert float(((r["these_low"] <= general) & (general <= r["these_high"])).mean()) < 0.85


def test_holm_hand_computed_and_nan_left_out_of_the_family():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    out = stats.holm([0.01, np.nan, 0.04])  # a test not computable is not in the family: m = 2
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)
    assert stats.holm(np.array([[0.5, 0.001, 0.02], [0.01, 0.04, 0.03]])) == pytest.approx(np.array([[0.5, 0.003, 0.04], [0.03, 0.06, 0.06]]))  # per row


def test_holm_keeps_the_familywise_rate_of_ten_arms_without_effect_at_five_percent():
    fw = familywise(1000, np.random.default_rng(5))
    for name, (raw, holm) in fw.items():
        assert raw > 0.15, (name, raw)  # unadjusted, ten arms: one of them "differs" in about a quarter of studies
        assert holm <= 0.06, (name, holm)


def test_mde_closed_form_for_many_operators():
    # tau = 0 and many operators: the t quantiles are the normal ones, se = sd / sqrt(K n)
    sd, k, n = 0.2, 5000, 2
    closed = math.exp((sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) * sd / math.sqrt(k * n))
    assert stats.mde(sd, 0.0, k, n) == pytest.approx(closed, rel=1e-3)


def test_mde_uses_the_spread_between_operators():
    # se^2 = (tau^2 + sd^2/n) / K with K - 1 degrees of freedom
    sd, tau, k, n = 0.1, 0.2, 10, 3
    se = math.sqrt((tau ** 2 + sd ** 2 / n) / k)
    expected = math.exp((sps.t.ppf(0.975, k - 1) + sps.t.ppf(0.8, k - 1)) * se)
    assert stats.mde(sd, tau, k, n) == pytest.approx(expected)
    assert stats.mde(sd, tau, k, 10_000) > math.exp((sps.t.ppf(0.975, k - 1) + sps.t.ppf(0.8, k - 1)) * tau / math.sqrt(k)) * 0.999


def test_mde_has_about_the_stated_power_under_the_noncentral_t():
    for sd, tau, k, n in [(0.2, 0.1, 10, 5), (0.1, 0.0, 8, 3), (0.3, 0.05, 20, 8)]:
        assert stats.power_at(stats.mde(sd, tau, k, n), sd, tau, k, n) == pytest.approx(0.8, abs=0.02)


def test_seeds_needed_and_when_only_more_operators_help():
    sd, k, effect = 0.1, 10, 1.05
    n = stats.seeds_needed(effect, sd, 0.0, k)
    assert stats.mde(sd, 0.0, k, n) <= effect < stats.mde(sd, 0.0, k, n - 1)
    # operators whose true ratios spread by 0.1: no seed count reaches 1.05x with ten of them
    assert stats.seeds_needed(effect, sd, 0.1, k) is None
    ops = stats.operators_needed(effect, sd, 0.1, 3)
    assert stats.mde(sd, 0.1, ops, 3) <= effect < stats.mde(sd, 0.1, ops - 1, 3)
    assert stats.seeds_needed(effect, sd, 0.1, 1) is None  # one operator: no interval over operators at all


def test_sol_score_is_half_at_the_library_and_one_at_speed_of_light():
    q = 0.6  # the library runs at 60% of speed-of-light
    assert stats.sol_score(1.0, q) == pytest.approx(0.5)
    assert stats.sol_score(1 / q, q) == pytest.approx(1.0)
    # from times: T_b = 1, T_SOL = 0.6, T_k = 0.8 -> S = 1 / (1 + 0.2 / 0.4)
    assert stats.sol_score(1 / 0.8, q) == pytest.approx(1 / 1.5)
