"""Tables from records written the way a trial writes them (benchmarks.synthetic -> trial_record)."""
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ablate.evaluate
from ablate.analysis import frames, report, stats, tables
from benchmarks.synthetic import GPU_ENV, single_shapes, write_study, write_trial

ROOT = Path(__file__).resolve().parents[2]


def ratio(tmp_path, baseline="goal_only"):
    return tables.ratio_table(tables.trials(tmp_path), baseline).iloc[0]


def test_one_rule_two_figures_produced_with_its_correctness_and_the_fallback(tmp_path):
    # Four accepted pairs at 2.0x and two trials of the arm rejected (untimed, as real ones are).
    for seed in range(6):
        write_trial(tmp_path, "goal_only", seed, 1.0)
        write_trial(tmp_path, "kda05", seed, 2.0 if seed < 4 else None, "accepted" if seed < 4 else "rejected")
    rec = json.loads(next(tmp_path.rglob("rmsnorm--kda05--*s5*/record.json")).read_text())
    assert rec["evaluation"]["timing"] == "none"  # what a rejected trial carries
    r = ratio(tmp_path)
    assert r["pairs"] == 6 and r["both_accepted"] == 4
    assert r["arm_correct"] == pytest.approx(4 / 6) and r["baseline_correct"] == 1.0
    assert r["ratio"] == pytest.approx(2.0)  # produced: where both were accepted
    assert r["fallback_ratio"] == pytest.approx(2 ** (4 / 6))  # every pair, a failure at 1.0x
    assert r["fallback_ratio_these_low"] < r["fallback_ratio"] < r["fallback_ratio_these_high"]
    assert (r["wins"], r["ties"], r["losses"]) == (4, 0, 2)  # a failure loses to an accepted kernel
    arms = tables.arm_table(tables.trials(tmp_path)).set_index("arm")
    assert (arms.loc["kda05", "accepted"], arms.loc["kda05", "rejected"], arms.loc["kda05", "trials"]) == (4, 2, 6)
    assert arms.loc["kda05", "correct_rate"] == pytest.approx(4 / 6)
    assert arms.loc["kda05", "speedup"] == pytest.approx(2.0) and arms.loc["kda05", "fallback"] == pytest.approx(2 ** (4 / 6))


def test_a_failing_arm_never_beats_a_slow_correct_one(tmp_path):
    """kda05 with every kernel rejected, goal_only with every kernel correct at 0.5x the library:
    no figure places kda05 ahead (the old rule gave 1.96x, Wilcoxon p = 0.004, 9 wins of 9)."""
    for op in ("rmsnorm", "softmax", "layernorm"):
        for seed in range(3):
            write_trial(tmp_path, "goal_only", seed, 0.5, operator=op)
            write_trial(tmp_path, "kda05", seed, None, "rejected" if seed else "no_submission", operator=op)
    r = ratio(tmp_path)
    assert math.isnan(r["ratio"]) and r["ratio_these_why"] == "no pair where both were accepted"
    assert r["fallback_ratio"] == pytest.approx(1.0)  # both at the library: level, never ahead
    assert r["fallback_ratio_these_why"].startswith("zero width") and math.isnan(r["fallback_ratio_these_p"])
    assert (r["wins"], r["ties"], r["losses"]) == (0, 0, 9) and (r["arm_correct"], r["baseline_correct"]) == (0.0, 1.0)
    arms = tables.arm_table(tables.trials(tmp_path)).set_index("arm")
    assert math.isnan(arms.loc["kda05", "speedup"]) and arms.loc["kda05", "operators_with_kernel"] == 0
    assert arms.loc["goal_only", "speedup"] == pytest.approx(0.5) and arms.loc["kda05", "fallback"] == 1.0
    paper = tables.paper_table(tables.trials(tmp_path)).set_index("arm")
    assert paper.loc["kda05", "beats_library"] == "0 of 3" and paper.loc["goal_only", "beats_library"] == "0 of 3"
    text = report.text(tmp_path, "goal_only")
    assert "no pair where both were accepted" in text and "wilcoxon" not in text.lower()


def test_a_slow_correct_kernel_counts_as_the_library_in_the_fallback_like_a_failure(tmp_path):
    # accepted at 0.6x against rejected: produced has no pair; the fallback scores both 1.0x
    write_trial(tmp_path, "goal_only", 0, None, "rejected")
    write_trial(tmp_path, "kda05", 0, 0.6)
    write_trial(tmp_path, "goal_only", 1, 0.5)
    write_trial(tmp_path, "kda05", 1, 0.6)
    r = ratio(tmp_path)
    assert r["ratio"] == pytest.approx(1.2) and r["both_accepted"] == 1  # 0.6x / 0.5x where both produced
    assert r["fallback_ratio"] == pytest.approx(1.0)  # max(0.6, 1) / 1.0 and max(0.6, 1) / max(0.5, 1)
    assert (r["wins"], r["ties"], r["losses"]) == (2, 0, 0)


@pytest.mark.parametrize("seed", range(5))
def test_no_study_where_an_arm_without_a_correct_kernel_scores_above_one_with(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for op in ("rmsnorm", "softmax"):
        for s in range(3):
            write_trial(tmp_path, "goal_only", s, float(np.exp(rng.normal(-0.5, 1.0))), operator=op)
            write_trial(tmp_path, "kda05", s, None, str(rng.choice(["rejected", "crashed", "no_submission"])), operator=op)
    r = ratio(tmp_path)
    arms = tables.arm_table(tables.trials(tmp_path)).set_index("arm")
    assert r["fallback_ratio"] <= 1.0 and not r["fallback_ratio_these_low"] > 1 and math.isnan(r["ratio"])
    assert arms.loc["kda05", "fallback"] <= arms.loc["goal_only", "fallback"] and r["wins"] == 0


def test_both_arms_all_rejected_show_no_interval_and_say_why(tmp_path):
    for op in ("rmsnorm", "softmax"):
        for seed in range(3):
            write_trial(tmp_path, "goal_only", seed, None, "rejected", operator=op)
            write_trial(tmp_path, "kda05", seed, None, "rejected", operator=op)
    r = ratio(tmp_path)
    assert math.isnan(r["ratio"]) and math.isnan(r["ratio_like_low"])
    assert r["fallback_ratio"] == 1.0 and math.isnan(r["fallback_ratio_these_low"]) and math.isnan(r["fallback_ratio_like_low"])
    assert "zero width" in r["fallback_ratio_these_why"] and "zero width" in r["fallback_ratio_like_why"]
    assert (r["wins"], r["ties"], r["losses"]) == (0, 6, 0)
    text = report.text(tmp_path, "goal_only")
    assert "[1.0x, 1.0x]" not in text and "not computable: zero width" in text


def test_two_operators_one_seed_no_interval_over_these_operators_and_no_p_value(tmp_path):
    for op, sp in (("rmsnorm", 1.2), ("softmax", 1.5)):
        write_trial(tmp_path, "goal_only", 0, 1.0, operator=op)
        write_trial(tmp_path, "kda05", 0, sp, operator=op)
    r = ratio(tmp_path)
    assert r["ratio"] == pytest.approx(math.sqrt(1.2 * 1.5))
    assert math.isnan(r["ratio_these_low"]) and math.isnan(r["ratio_these_p"]) and r["ratio_these_why"] == "one seed per operator"
    assert r["ratio_like_low"] < r["ratio"] < r["ratio_like_high"]  # two operators: one degree of freedom, wide
    assert "wilcoxon" not in " ".join(tables.ratio_table(tables.trials(tmp_path), "goal_only").columns)


def test_unpaired_trials_of_either_arm_are_counted_and_named(tmp_path):
    for seed in range(5):
        write_trial(tmp_path, "goal_only", seed, 1.0)
        write_trial(tmp_path, "kda05", seed, 1.5)
    for seed in range(5, 9):  # four baseline trials without a partner
        write_trial(tmp_path, "goal_only", seed, 1.0)
    write_trial(tmp_path, "kda05", 3, 1.4, operator="softmax")  # and one of the arm
    r = ratio(tmp_path)
    assert r["pairs"] == 5 and r["unpaired_baseline"] == 4 and r["unpaired_arm"] == 1
    assert r["unpaired"] == "kda05: softmax s3; goal_only: rmsnorm s5, s6, s7, s8"
    assert "goal_only: rmsnorm s5, s6, s7, s8" in report.text(tmp_path, "goal_only")


def test_scopes_are_never_pooled_a_row_per_scope_and_the_title_says_so(tmp_path):
    """No effect at multi_shape, 1.5x at single_shape (the old analysis: one ratio, 1.42x)."""
    for seed in range(3):
        write_trial(tmp_path, "goal_only", seed, 1.0, shapes="eval")
        write_trial(tmp_path, "kda05", seed, 1.0, shapes="eval")
        for shape in single_shapes("rmsnorm"):
            write_trial(tmp_path, "goal_only", seed, 1.0, shapes=shape, scope="single_shape")
            write_trial(tmp_path, "kda05", seed, 1.5, shapes=shape, scope="single_shape")
    s = tables.summary(tmp_path, "goal_only")
    r = s["ratios"].set_index("scope")
    assert sorted(r.index) == ["multi_shape", "single_shape"]
    assert r.loc["multi_shape", "ratio"] == pytest.approx(1.0) and r.loc["single_shape", "ratio"] == pytest.approx(1.5)
    # a seed's four single-shape pairs are one value of the estimator, not four seeds
    assert r.loc["single_shape", "pairs"] == 12 and r.loc["single_shape", "seeds"] == 3
    plan = s["planning"].set_index(["scope", "score"])
    assert plan.loc[("single_shape", "produced"), "seeds"] == 3
    arms = s["arms"].set_index(["scope", "arm"])
    assert arms.loc[("single_shape", "kda05"), "trials"] == 12 and arms.loc[("multi_shape", "kda05"), "trials"] == 3
    [line] = s["designs"]
    assert "multi_shape (eval)" in line and "single_shape (eval)" in line and "never pooled" in line
    assert "mixes scopes (multi_shape, single_shape)" in report.title(s)


def test_every_kind_of_failed_trial_is_counted_by_its_outcome(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 1.5)
    write_trial(tmp_path, "goal_only", 1, None, "crashed")
    write_trial(tmp_path, "goal_only", 2, None, "no_submission")
    write_trial(tmp_path, "goal_only", 3, 1.2, end_reason="turns")  # ran out of turns, kernel judged anyway
    write_trial(tmp_path, "goal_only", 4, None, "rejected", end_reason="tokens")
    a = tables.arm_table(tables.trials(tmp_path)).iloc[0]
    assert (a["trials"], a["accepted"], a["rejected"], a["crashed"], a["no_submission"], a["budget_out"]) == (5, 2, 1, 1, 1, 2)
    assert a["correct_rate"] == pytest.approx(2 / 5) and a["speedup"] == pytest.approx(math.sqrt(1.5 * 1.2))
    assert a["fallback"] == pytest.approx((1.5 * 1.2) ** (1 / 5))


def test_a_rejected_trial_keeps_its_studys_timing_kind(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 1.0, gpu=True)
    write_trial(tmp_path, "kda05", 0, None, "rejected", gpu=True)
    write_trial(tmp_path, "goal_only", 0, 1.0, gpu=False, study="cpu")
    df = tables.trials(tmp_path)
    assert dict(zip(df["trial_id"].str.split("--").str[1] + "/" + df["study"], df["timing"])) == {
        "goal_only/study": "cuda", "kda05/study": "cuda", "goal_only/cpu": "cpu-interpreted"}


def test_cpu_interpreted_and_gpu_figures_are_never_mixed(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 1.0, gpu=True)
    write_trial(tmp_path, "kda05", 0, 3.0, gpu=False)  # same match key, another kind of machine
    df = tables.trials(tmp_path)
    assert df["match_key"].nunique() == 1
    assert set(tables.arm_table(df)["timing"]) == {"cuda", "cpu-interpreted"}
    r = tables.ratio_table(df, "goal_only").set_index("timing")
    assert list(r["pairs"]) == [0, 0]  # a row in each kind, each naming the trial that has no partner there
    assert r.loc["cuda", "unpaired"] == "goal_only: rmsnorm s0" and r.loc["cpu-interpreted", "unpaired"] == "kda05: rmsnorm s0"


def test_estimate_and_interval_come_from_one_estimator(tmp_path):
    # Ten pairs near 2x on one operator, one at 0.5x on another: the estimate is the mean over
    # operators (1.0x) and its interval contains it.
    rng = np.random.default_rng(0)
    for seed in range(10):
        write_trial(tmp_path, "goal_only", seed, 1.0)
        write_trial(tmp_path, "kda05", seed, float(2 * np.exp(rng.normal(0, 0.05))))
    write_trial(tmp_path, "goal_only", 0, 1.0, operator="softmax")
    write_trial(tmp_path, "kda05", 0, 0.5, operator="softmax")
    r = ratio(tmp_path)
    assert r["ratio"] == pytest.approx(1.0, abs=0.03)
    assert r["ratio_these_low"] < r["ratio"] < r["ratio_these_high"]
    assert r["ratio_like_low"] < r["ratio_these_low"] and r["ratio_these_high"] < r["ratio_like_high"]  # two operators 4x apart


def test_known_true_ratios_come_out(tmp_path):
    write_study(tmp_path, {"goal_only": 1.0, "kda05": 1.3, "goal_only+knowledge": 0.8}, ["rmsnorm", "softmax"], seeds=3, sd=0.0)
    r = tables.ratio_table(tables.trials(tmp_path), "goal_only").set_index("comparison")
    assert r.loc["kda05 / goal_only", "ratio"] == pytest.approx(1.3)
    assert r.loc["goal_only+knowledge / goal_only", "ratio"] == pytest.approx(0.8)
    assert r.loc["goal_only+knowledge / goal_only", "fallback_ratio"] == pytest.approx(1.0)  # 0.8x falls back to the library
    assert (r["pairs"] == 6).all() and (r["refused"] == 0).all()
    assert r["ratio_these_why"].str.startswith("zero width").all()  # no spread at all: no interval claimed


def test_ratio_per_operator_is_the_paired_interval_over_its_seeds(tmp_path):
    from scipy import stats as sps

    base, arm = [1.0, 1.1, 0.9, 1.05], [1.5, 1.4, 1.2, 1.6]
    for seed, (b, a) in enumerate(zip(base, arm)):
        write_trial(tmp_path, "goal_only", seed, b)
        write_trial(tmp_path, "kda05", seed, a)
        write_trial(tmp_path, "goal_only", seed, 1.0, operator="softmax")
        write_trial(tmp_path, "kda05", seed, None, "crashed", operator="softmax")
    t = tables.operator_ratio_table(tables.trials(tmp_path), "goal_only").set_index("operator")
    ci = sps.ttest_rel(np.log(arm), np.log(base)).confidence_interval()
    assert (math.log(t.loc["rmsnorm", "ratio_these_low"]), math.log(t.loc["rmsnorm", "ratio_these_high"])) == pytest.approx((ci.low, ci.high))
    assert math.isnan(t.loc["softmax", "ratio"]) and t.loc["softmax", "fallback_ratio"] == pytest.approx(1.0)
    assert t.loc["softmax", "losses"] == 4  # crashed against accepted: four losses, not ties


def test_geomean_first_over_seeds_within_operator_then_over_operators(tmp_path):
    write_trial(tmp_path, "a", 0, 4.0, operator="rmsnorm")
    write_trial(tmp_path, "a", 1, 4.0, operator="rmsnorm")
    write_trial(tmp_path, "a", 2, 4.0, operator="rmsnorm")
    write_trial(tmp_path, "a", 0, 1.0, operator="softmax")
    t = tables.arm_table(tables.trials(tmp_path)).iloc[0]
    assert t["speedup"] == pytest.approx(2.0)  # not 4^(3/4): every operator weighs the same


def test_a_differing_evaluator_version_is_refused_and_named(tmp_path, monkeypatch):
    write_trial(tmp_path, "goal_only", 0, 1.0)
    monkeypatch.setattr(ablate.evaluate._reasons, "VERSION", "999")
    write_trial(tmp_path, "kda05", 0, 2.0)
    s = tables.summary(tmp_path, "goal_only")
    assert s["ratios"].iloc[0]["pairs"] == 0 and s["ratios"].iloc[0]["refused"] == 1
    [line] = tables.refusal_lines(s["refusals"])
    assert "evaluator_version differs" in line and '"999"' in line
    assert "evaluator_version differs" in report.text(tmp_path, "goal_only")


@pytest.mark.parametrize("change,field", [
    ({"env": dict(GPU_ENV, gpu="NVIDIA H100 80GB HBM3")}, "environment.gpu"),
    ({"env": dict(GPU_ENV, torch="2.12.0+cu130")}, "environment.torch"),
    ({"budget": {"turns": 11}}, "budget.turns"),
    ({"sandbox": {"command_timeout_s": 60}}, "sandbox.command_timeout_s"),
])
def test_every_mismatched_key_field_is_refused_and_named(tmp_path, change, field):
    write_trial(tmp_path, "goal_only", 0, 1.0)
    write_trial(tmp_path, "kda05", 0, 2.0, **change)
    s = tables.summary(tmp_path, "goal_only")
    [line] = tables.refusal_lines(s["refusals"])
    assert f" {field} differs" in line, line
    assert s["ratios"].iloc[0]["pairs"] == 0


def test_the_same_shape_set_name_with_other_shapes_is_refused_and_named(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 1.0)
    path = write_trial(tmp_path, "kda05", 0, 2.0)
    rec = json.loads((path / "record.json").read_text())
    rec["match_fields"]["shape_lists"]["eval"] = [{"M": 9, "N": 512, "dtype": "bfloat16"}]  # the set changed between runs
    rec["match_key"] = "0" * 16
    (path / "record.json").write_text(json.dumps(rec))
    s = tables.summary(tmp_path, "goal_only")
    [line] = tables.refusal_lines(s["refusals"])
    assert " shape_lists.eval differs" in line and s["ratios"].iloc[0]["pairs"] == 0


def test_another_shape_set_is_another_design_not_a_refusal(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 1.0)
    write_trial(tmp_path, "kda05", 0, 2.0, shapes="eval")
    s = tables.summary(tmp_path, "goal_only")
    r = s["ratios"].set_index("shapes")
    assert not s["refusals"] and list(r["pairs"]) == [0, 0]
    assert r.loc["eval", "unpaired"] == "kda05: rmsnorm s0" and r.loc["smoke", "unpaired"] == "goal_only: rmsnorm s0"


def test_a_pair_judged_against_different_libraries_is_refused_and_the_trial_flagged(tmp_path):
    """Same versions on both machines, but liger failed to import on one: that trial's speedup is
    against torch alone (3x higher here), so its ratio to the other is not the arm's effect."""
    write_trial(tmp_path, "goal_only", 0, 1.0)
    write_trial(tmp_path, "kda05", 0, 1.0, not_loaded=("liger",))
    write_trial(tmp_path, "goal_only", 1, 1.0)
    write_trial(tmp_path, "kda05", 1, 2.0)  # the same libraries: paired
    s = tables.summary(tmp_path, "goal_only")
    assert s["ratios"].iloc[0]["pairs"] == 1 and s["ratios"].iloc[0]["refused"] == 1
    [line] = tables.refusal_lines(s["refusals"])
    assert "libraries timed" in line and "torch_eager" in line
    [flag] = [f for f in s["flagged"] if "baseline_not_loaded" in f]
    assert "1 accepted trial(s)" in flag and "rmsnorm--kda05" in flag
    text = report.text(tmp_path, "goal_only")
    assert "libraries timed" in text and "flag baseline_not_loaded" in text


def test_a_trial_with_its_exact_match_is_not_reported_as_refused(tmp_path):
    for turns in (10, 11):  # two budgets in one store: each arm pairs with its own budget
        write_trial(tmp_path, "goal_only", 0, 1.0, budget={"turns": turns})
        write_trial(tmp_path, "kda05", 0, 2.0, budget={"turns": turns})
    s = tables.summary(tmp_path, "goal_only")
    assert s["ratios"].iloc[0]["pairs"] == 2 and not s["refusals"]


def test_an_arm_whose_records_differ_in_documents_is_not_pooled(tmp_path):
    wiki = {"name": "kda05", "mechanisms": {"knowledge": {}}, "hashes": {"knowledge/gemm.md": "aaa"}}
    write_trial(tmp_path, "kda05", 0, 2.0, harness=wiki)
    write_trial(tmp_path, "kda05", 1, 1.0, harness=dict(wiki, hashes={"knowledge/gemm.md": "bbb"}))
    s = tables.summary(tmp_path)
    assert len(s["arms"]) == 2 and all(a.startswith("kda05@") for a in s["arms"]["arm"])
    [line] = s["variants"]
    assert "harness.hashes.knowledge/gemm.md" in line and "not pooled" in line


def test_a_corrupt_or_partial_record_is_named_and_skipped(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 1.0)
    write_trial(tmp_path, "kda05", 0, 2.0)
    bad = tmp_path / "study" / "broken-trial"
    bad.mkdir()
    (bad / "record.json").write_text('{"trial_id": "broken", "arm": ')
    partial = tmp_path / "study" / "partial-trial"
    partial.mkdir()
    (partial / "record.json").write_text(json.dumps({"trial_id": "partial", "operator": "rmsnorm", "seed": 0}))
    typed = tmp_path / "study" / "typed-trial"
    typed.mkdir()
    (typed / "record.json").write_text(json.dumps({"trial_id": "t", "arm": "a", "operator": "x", "seed": 0, "evaluation": "ok"}))
    records, skipped = frames.load(tmp_path)
    assert len(records) == 2
    assert {p.split("/")[-2]: why.split(":")[0] for p, why in skipped} == {
        "broken-trial": "unreadable", "partial-trial": "partial record", "typed-trial": "partial record"}
    text = report.text(tmp_path, "goal_only")
    assert "skipped 3 record(s)" in text and "broken-trial" in text and "kda05 / goal_only" in text


def test_a_record_forged_inside_a_workspace_is_not_a_trial(tmp_path):
    path = write_trial(tmp_path, "goal_only", 0, 1.0)
    (path / "workspace").mkdir()
    forged = json.loads((path / "record.json").read_text()) | {"trial_id": "forged", "arm": "kda05"}
    forged["evaluation"]["geomean_speedup"] = 100.0
    (path / "workspace" / "record.json").write_text(json.dumps(forged))
    records, skipped = frames.load(tmp_path)
    assert [r["trial_id"] for r in records] == [json.loads((path / "record.json").read_text())["trial_id"]]
    assert not any("forged" in why for _, why in skipped)  # the store reads trial directories, never a workspace


def test_shape_roles_public_hidden_single(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 1.0, shapes="eval")  # public 1 shape + hidden
    write_trial(tmp_path, "goal_only", 1, 1.0, operator="gemm", shapes="public")  # one judged shape
    sh = frames.shape_frame(frames.load(tmp_path)[0])
    roles = sh.groupby("trial_id")["role"].apply(lambda s: sorted(set(s)))
    assert sorted(map(tuple, roles)) == [("hidden", "public"), ("single",)]
    assert (sh[sh["role"] == "public"]["shape_id"] == "M=16384,N=4096,dtype=bfloat16").all()


def test_hidden_shape_generalisation(tmp_path):
    # public speedup 2.0, hidden 1.0 each: the kernel keeps half its speedup on hidden shapes
    write_trial(tmp_path, "a", 0, None, shapes="eval", shape_speedups=[2.0, 1.0, 1.0, 1.0])
    write_trial(tmp_path, "a", 1, None, "rejected", shapes="eval")
    h = tables.hidden_table(frames.shape_frame(frames.load(tmp_path)[0]), tables.trials(tmp_path)).iloc[0]
    assert (h["trials"], h["public_correct"], h["hidden_given_public"]) == (2, 1, 1.0)
    assert h["speedup_kept"] == pytest.approx(0.5)


def test_fast_p_and_sol_score(tmp_path):
    for seed, sp in enumerate([0.9, 1.2, 1.6, 2.5]):
        write_trial(tmp_path, "a", seed, sp)
    write_trial(tmp_path, "a", 4, None, "rejected")
    df = tables.trials(tmp_path)
    f = tables.fast_p_table(df).iloc[0]
    assert (f["fast_0"], f["fast_1"], f["fast_1.5"], f["fast_2"]) == (0.8, 0.6, 0.4, 0.2)
    s = tables.sol_score_table(df, frames.shape_frame(frames.load(tmp_path)[0])).iloc[0]
    # synthetic shapes: the library runs at q = 0.5 of speed-of-light; S = 1 / (1 + (1/s - q) / (1 - q))
    produced = [1 / (1 + (1 / sp - 0.5) / 0.5) for sp in (0.9, 1.2, 1.6)] + [1.0]  # 2.5x is capped at speed-of-light
    assert s["sol_score"] == pytest.approx(np.mean(produced))  # accepted kernels only
    assert s["sol_score_fallback"] == pytest.approx(np.mean([max(x, 0.5) for x in produced] + [0.5]))


def test_cost_and_mechanism_use_per_arm(tmp_path):
    write_trial(tmp_path, "kda05", 0, 2.0, cost_usd=2.0, events=[{"event": "review"}, {"event": "review"}],
                evaluate_calls=[1.5], mechanisms={"knowledge": {"queries": 3, "pages_read": ["gemm", "triton"]}})
    write_trial(tmp_path, "goal_only", 0, 1.0, cost_usd=1.0)
    s = tables.summary(tmp_path, "goal_only", activity=True)
    c = s["cost"].set_index("arm")
    assert c.loc["kda05", "fallback_gain_per_usd"] == pytest.approx(0.5) and c.loc["goal_only", "fallback_gain_per_usd"] == 0
    m = s["mechanisms"].set_index("arm")
    assert m.loc["kda05", "event:review"] == 2 and m.loc["kda05", "knowledge.queries"] == 3  # from agent.mechanisms
    assert m.loc["kda05", "knowledge.pages_read"] == 2
    assert m.loc["kda05", "tool:evaluate"] == 1 and m.loc["goal_only", "tool:evaluate"] == 0


def test_best_so_far_against_turns_counts_every_trial(tmp_path):
    write_trial(tmp_path, "kda05", 0, 2.0, turns=4, evaluate_calls=[None, 1.5, 1.2, 3.0])  # final 2.0 < best 3.0 (public)
    write_trial(tmp_path, "kda05", 1, None, "rejected", turns=4)
    s = tables.summary(tmp_path, activity=True)
    curve = s["best_by_turn"].set_index("turn")
    assert curve["fallback"].iloc[0] == pytest.approx(1.0) and math.isnan(curve["speedup"].iloc[0])  # nothing accepted yet
    assert curve.loc[curve.index >= 2, "fallback"].iloc[0] == pytest.approx(math.sqrt(1.5))
    assert curve.loc[curve.index >= 2, "speedup"].iloc[0] == pytest.approx(1.5)  # over the one trial with a kernel
    assert curve.loc[curve.index >= 2, "with_kernel"].iloc[0] == 0.5
    assert curve["fallback"].iloc[-1] == pytest.approx(math.sqrt(3.0))


def test_best_so_far_never_falls_below_the_library_or_from_where_it_was(tmp_path):
    """Accepted kernels at 0.002x (a CPU interpreter's figures): the old curve started at 1.0x
    (nothing yet) and fell to 0.002x when they arrived."""
    for seed in range(3):
        write_trial(tmp_path, "goal_only", seed, 0.002, turns=5, evaluate_calls=[0.001, None, 0.0015, 0.002])
    curve = tables.summary(tmp_path, activity=True)["best_by_turn"]
    assert (curve["fallback"] >= 1.0).all() and curve["fallback"].is_monotonic_increasing
    assert curve["with_kernel"].is_monotonic_increasing and curve["with_kernel"].iloc[-1] == 1.0
    assert curve["speedup"].dropna().iloc[-1] == pytest.approx(0.002)


def test_planning_from_a_pilot(tmp_path):
    write_study(tmp_path, {"goal_only": 1.0, "kda05": 1.1}, ["rmsnorm", "softmax"], seeds=4, sd=0.1)
    plan = tables.planning_table(tables.trials(tmp_path), "goal_only").set_index("score")
    p = plan.loc["produced"]
    assert p["operators"] == 2 and p["seeds"] == 4 and 0.05 < p["sd_within"] < 0.3
    # the random-effect variance and its K - 1 degrees of freedom
    assert p["mde_ratio"] == pytest.approx(stats.mde(p["sd_within"], p["sd_between"], 2, 4))
    assert p["operators_for_1.05x"] > 2


def test_planning_says_when_only_more_operators_help(tmp_path):
    for op, true in (("rmsnorm", 1.0), ("softmax", 1.5), ("layernorm", 0.7)):  # operators far apart
        for seed in range(3):
            write_trial(tmp_path, "goal_only", seed, 1.0, operator=op)
            write_trial(tmp_path, "kda05", seed, true * (1 + 0.01 * seed), operator=op)
    p = tables.planning_table(tables.trials(tmp_path), "goal_only").set_index("score").loc["produced"]
    assert p["sd_between"] > 0.2 and p["seeds_for_1.05x"] is None and "more operators are needed" in p["why"]
    assert p["operators_for_1.05x"] > 3


def test_report_names_the_ratio_and_labels_cpu_timing(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 1.0, gpu=False)
    write_trial(tmp_path, "kda05", 0, 1.5, gpu=False)
    text = report.text(tmp_path / "study", baseline="goal_only")
    assert "kda05 / goal_only" in text and "1.5" in text and "not GPU figures" in text


def test_analysis_cli_bad_path_is_one_line(tmp_path, capsys):
    from ablate.analysis.__main__ import main

    assert main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]


def test_a_misspelt_study_path_is_one_line_naming_the_nearest_study(tmp_path, capsys):
    from ablate.analysis.__main__ import main

    write_trial(tmp_path, "goal_only", 0, 1.0, study="smoke")
    write_trial(tmp_path, "goal_only", 0, 1.0, study="justgoal")
    (tmp_path / "report").mkdir()  # not a study: never suggested
    assert main([str(tmp_path / "smok")]) == 2
    [err] = capsys.readouterr().err.strip().splitlines()
    assert err == (f"error: {tmp_path / 'smok'} does not exist; did you mean {tmp_path / 'smoke'}? "
                   f"(studies under {tmp_path}: smoke, justgoal)")
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    [err] = capsys.readouterr().err.strip().splitlines()
    assert "no trial records under" in err


def test_a_misspelt_arm_is_one_line_naming_the_arms(tmp_path, capsys):
    from ablate.analysis.__main__ import main

    write_trial(tmp_path, "goal_only", 0, 1.0)
    write_trial(tmp_path, "kda05", 0, 1.5)
    assert main([str(tmp_path / "study"), "--baseline", "goal-only", "--no-files"]) == 2
    captured = capsys.readouterr()
    [err] = captured.err.strip().splitlines()
    assert err == f"error: no arm 'goal-only' in {tmp_path / 'study'} (did you mean goal_only?); arms: goal_only, kda05"
    assert captured.out == ""
    assert main([str(tmp_path / "study"), "--baseline", "kda05", "--no-files"]) == 0  # a real arm: fine
    assert "goal_only / kda05" in capsys.readouterr().out


def test_the_cli_and_notebook_default_to_where_the_default_study_writes():
    import ablate.analysis.__main__ as cli

    conf = (ROOT / "conf" / "config.yaml").read_text()
    study = (ROOT / "conf" / "study" / "smoke.yaml").read_text()
    assert "store: runs" in conf and "- study: smoke" in conf and "name: smoke" in study
    assert cli.DEFAULT_STUDY == Path("runs/smoke")
    notebook = (ROOT / "analysis" / "notebooks" / "ratios.ipynb").read_text()
    assert "runs/smoke" in notebook and "runs/default" not in notebook


def test_rejections_are_counted_per_check_and_arm(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 2.0)
    write_trial(tmp_path, "kda05", 0, None, "rejected")
    write_trial(tmp_path, "kda05", 1, None, "rejected")
    write_trial(tmp_path, "kda05", 2, None, "no_submission")
    rej = tables.rejection_table(tables.trials(tmp_path))
    assert rej.to_dict("records") == [{"arm": "kda05", "reason": "incorrect", "trials": 2},
                                      {"arm": "kda05", "reason": "no_submission", "trials": 1}]
    text = report.text(tmp_path / "study", baseline="goal_only")
    assert "Rejected trials by evaluator check" in text


def test_no_rejections_no_table(tmp_path):
    write_trial(tmp_path, "goal_only", 0, 2.0)
    assert tables.rejection_table(tables.trials(tmp_path)).empty
    assert "by evaluator check" not in report.text(tmp_path / "study")


def _snapshots(trial_dir, speedups, judged_on="NVIDIA H200", version=None):
    """Give a trial the snapshots a run takes (one per turn) and, unless judged_on is None, the
    judgements `python -m ablate.rescore --snapshots` stores (None: a rejected snapshot)."""
    import hashlib

    rec = json.loads((trial_dir / "record.json").read_text())
    taken = []
    (trial_dir / "snapshots" / "evaluations").mkdir(parents=True)
    for turn, sp in enumerate(speedups, 1):
        data = f"def kernel(x, w):\n    return x  # {turn}\n".encode()
        snap = {"turn": turn, "tokens": 100 * turn, "cost_usd": 0.05 * turn, "sha256": hashlib.sha256(data).hexdigest(),
                "bytes": len(data), "file": f"turn-{turn:04d}.py", "tool": "write_file"}
        (trial_dir / "snapshots" / snap["file"]).write_bytes(data)
        taken.append(snap)
        if judged_on:
            ev = {"verdict": "accepted" if sp else "rejected", "geomean_speedup": sp, "device": {"name": judged_on},
                  "submission_sha256": snap["sha256"], "evaluator_version": version}
            (trial_dir / "snapshots" / "evaluations" / f"turn-{turn:04d}--x.json").write_text(
                json.dumps({"snapshot": snap, "evaluation": ev, "judged_at": "2026-12-02T00:00:00"}))
    rec["snapshots"] = {"file": "kernel.py", "taken": taken, "not_kept": {}}
    (trial_dir / "record.json").write_text(json.dumps(rec))


def test_best_so_far_says_when_some_arms_have_points_during_their_trials_and_others_none(tmp_path):
    write_trial(tmp_path, "kda05", 0, 2.0, turns=4, evaluate_calls=[1.5])
    goal = write_trial(tmp_path, "goal_only", 0, 2.0, turns=4)
    _snapshots(goal, [None, 1.8, 2.5], judged_on=None)  # taken, not judged yet
    s = tables.summary(tmp_path, "goal_only", activity=True)
    [line] = s["footing"]
    assert line.startswith("best-so-far (cuda, scripted-kernel-search-v1): not at equal footing: kda05 with trusted")
    assert "goal_only with only the final judgement" in line and "1 trial(s) of those have snapshots to judge" in line
    assert f"python -m ablate.rescore {tmp_path} --snapshots" in line and line in report.notes(s)
    curve = s["best_by_turn"].set_index(["arm", "turn"])["fallback"]
    assert curve.loc["goal_only"].iloc[1:-1].eq(1.0).all()  # what the note warns of: 1.0x until its end

    (goal / "snapshots").rename(tmp_path / "unjudged")
    _snapshots(goal, [None, 1.8, 2.5])  # now judged: goal_only has points before its end
    s = tables.summary(tmp_path, "goal_only", activity=True)
    assert s["footing"] == []
    g = s["best_by_turn"].set_index(["arm", "turn"])["speedup"].loc["goal_only"]
    assert g[(g.index >= 2) & (g.index < 3)].iloc[0] == pytest.approx(1.8) and g.iloc[-1] == pytest.approx(2.5)
    pr = s["progress"]
    assert list(pr.loc[pr["source"] == "snapshot", "tokens"]) == [100, 200, 300]


def test_a_snapshot_judged_on_another_device_or_evaluator_version_is_no_point(tmp_path):
    a = write_trial(tmp_path, "goal_only", 0, 2.0, turns=4, gpu=True)
    _snapshots(a, [3.0], judged_on="cpu")  # interpreter figures on a GPU study's curve: never
    b = write_trial(tmp_path, "goal_only", 1, 2.0, turns=4, gpu=True, record_extra=None)
    ev = json.loads((b / "record.json").read_text())
    ev["evaluation"]["evaluator_version"] = "3"
    (b / "record.json").write_text(json.dumps(ev))
    _snapshots(b, [3.0], version="2")  # an older evaluator's judgement beside a version-3 final
    c = write_trial(tmp_path, "goal_only", 2, 2.0, turns=4, gpu=True)
    _snapshots(c, [3.0])
    progress, _ = frames.activity(frames.load(tmp_path)[0])
    points = progress[progress["source"] == "snapshot"]
    assert list(points["seed"]) == [2] and list(points["speedup"]) == [3.0]


def _flag(tmp_path, arm, seed, flags, speedup=1.5, outcome="accepted", sandbox="bwrap"):
    path = write_trial(tmp_path, arm, seed, speedup, outcome)
    rec = json.loads((path / "record.json").read_text())
    rec["evaluation"]["flags"] = flags
    rec["evaluation"]["sandbox"] = sandbox
    (path / "record.json").write_text(json.dumps(rec))
    return rec["trial_id"]


def test_accepted_trials_the_judge_flagged_are_named_before_the_numbers(tmp_path):
    """A speedup over 3x, a noisy best library, a GPU the judge could not lock, an unconfined
    candidate: the trial still counts, and the report names it first so a reader looks at it."""
    fast = _flag(tmp_path, "kda05", 0, ["speedup_over_3x"], speedup=4.0)
    noisy = _flag(tmp_path, "kda05", 1, ["noisy_best_baseline", "speedup_over_3x"], speedup=3.5)
    _flag(tmp_path, "kda05", 2, ["speedup_over_3x"], outcome="rejected")  # not counted as a speedup: not listed
    loose = _flag(tmp_path, "goal_only", 0, [], sandbox="none")
    _flag(tmp_path, "goal_only", 1, [])
    s = tables.summary(tmp_path, "goal_only")
    lines = {line.split(":")[0]: line for line in s["flagged"]}
    assert set(lines) == {"flag noisy_best_baseline", "flag speedup_over_3x", "flag unconfined_candidate"}
    assert "2 accepted trial(s)" in lines["flag speedup_over_3x"] and fast in lines["flag speedup_over_3x"] \
        and noisy in lines["flag speedup_over_3x"]
    assert loose in lines["flag unconfined_candidate"]
    assert all(line in report.text(tmp_path, baseline="goal_only") for line in s["flagged"])


def test_the_estimator_for_many_columns_at_once_is_the_estimator():
    from ablate.analysis import scoring

    rng = np.random.default_rng(4)
    g = pd.DataFrame({"operator": rng.choice(["a", "b", "c"], 40), "seed": rng.integers(0, 4, 40)})
    logs = rng.normal(size=(40, 3))
    logs[rng.random((40, 3)) < 0.3] = np.nan  # trials without a kernel
    many = scoring.geomeans(scoring.per_seed(g, logs))
    for j in range(3):
        assert many[j] == pytest.approx(scoring.estimate(scoring.per_seed(g, logs[:, j])).estimate)
