"""Ratios and geometric means computed from records alone."""
import json
import math

import numpy as np
import pytest

from analysis import report, tables


def write(root, arm, seed, speedup, operator="rmsnorm", verdict="accepted", timing="cuda-events", key=None, model="m"):
    d = root / "study" / f"{operator}--{arm}--s{seed}--{timing}"
    d.mkdir(parents=True)
    rec = {"trial_id": d.name, "study": "study", "arm": arm, "match_key": key or f"{operator}-{seed}-{timing}",
           "model": {"id": model}, "operator": operator, "seed": seed, "end_reason": "submitted",
           "usage": {"total_tokens": 100, "cost_usd": 0.5}, "agent": {"turns": 7},
           "evaluation": {"verdict": verdict, "reasons": [] if verdict == "accepted" else ["incorrect"],
                          "timing": timing, "geomean_speedup": speedup,
                          "shapes": [{"shape_id": "M=1", "speedup_vs_best": speedup, "sol_fraction": 0.5}]}}
    (d / "record.json").write_text(json.dumps(rec))


def test_ratio_pairs_by_match_key_and_is_a_geomean(tmp_path):
    for seed, (g, k) in enumerate([(1.0, 2.0), (2.0, 2.0), (1.0, 0.5)]):
        write(tmp_path, "goal_only", seed, g)
        write(tmp_path, "kda05", seed, k)
    df = tables.trials(tmp_path)
    r = tables.ratio_table(df, "goal_only").iloc[0]
    assert r["pairs"] == 3
    assert r["geomean_ratio"] == pytest.approx(math.exp((math.log(2) + 0 + math.log(0.5)) / 3))
    assert r["ci_low"] <= r["geomean_ratio"] <= r["ci_high"]


def test_geomean_first_over_operators_within_seed(tmp_path):
    write(tmp_path, "a", 0, 4.0, operator="x")
    write(tmp_path, "a", 0, 1.0, operator="y")
    t = tables.arm_table(tables.trials(tmp_path)).iloc[0]
    assert t["geomean_speedup"] == pytest.approx(2.0)


def test_rejected_trials_count_as_configured_and_are_counted(tmp_path):
    write(tmp_path, "goal_only", 0, 2.0)
    write(tmp_path, "kda05", 0, None, verdict="rejected")
    df = tables.trials(tmp_path)
    assert tables.ratio_table(df, "goal_only", rejected_as=1.0).iloc[0]["geomean_ratio"] == pytest.approx(0.5)
    assert tables.ratio_table(df, "goal_only", rejected_as="exclude").iloc[0]["pairs"] == 0
    arms = tables.arm_table(df).set_index("arm")
    assert arms.loc["kda05", "rejected"] == 1 and arms.loc["goal_only", "accepted"] == 1


def test_cpu_interpreted_and_gpu_figures_are_never_mixed(tmp_path):
    write(tmp_path, "goal_only", 0, 1.0, timing="cuda-events")
    write(tmp_path, "kda05", 0, 3.0, timing="cpu-interpreted", key="rmsnorm-0-cuda-events")
    df = tables.trials(tmp_path)
    assert set(tables.arm_table(df)["timing"]) == {"cuda-events", "cpu-interpreted"}
    assert tables.ratio_table(df, "goal_only").iloc[0]["pairs"] == 0


def test_geomean_does_not_overflow():
    values = np.full(5000, 1e300)
    assert tables._geomean(values) == pytest.approx(1e300)


def test_report_names_the_ratio_and_labels_cpu_timing(tmp_path):
    write(tmp_path, "goal_only", 0, 1.0, timing="cpu-interpreted")
    write(tmp_path, "kda05", 0, 1.5, timing="cpu-interpreted")
    text = report.text(tmp_path / "study", baseline="goal_only")
    assert "kda05 / goal_only" in text and "1.5" in text and "not GPU figures" in text


def test_analysis_cli_bad_path_is_one_line(tmp_path, capsys):
    from analysis.__main__ import main

    assert main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]


def test_rejections_are_counted_per_check_and_arm(tmp_path):
    write(tmp_path, "goal_only", 0, 2.0)
    write(tmp_path, "kda05", 0, None, verdict="rejected")
    write(tmp_path, "kda05", 1, None, verdict="rejected")
    d = tmp_path / "study" / "rmsnorm--kda05--s2--none"  # a trial that ended with no evaluation
    d.mkdir()
    (d / "record.json").write_text(json.dumps({"trial_id": d.name, "study": "study", "arm": "kda05", "match_key": "k",
                                               "model": {"id": "m"}, "operator": "rmsnorm", "seed": 2}))
    rej = tables.rejection_table(tables.trials(tmp_path))
    assert rej.to_dict("records") == [{"arm": "kda05", "reason": "incorrect", "trials": 2},
                                      {"arm": "kda05", "reason": "not_evaluated", "trials": 1}]
    text = report.text(tmp_path / "study", baseline="goal_only")
    assert "rejected trials by evaluator check" in text and "not_evaluated" in text


def test_no_rejections_no_table(tmp_path):
    write(tmp_path, "goal_only", 0, 2.0)
    assert tables.rejection_table(tables.trials(tmp_path)).empty
    assert "by evaluator check" not in report.text(tmp_path / "study")
