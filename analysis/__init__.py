"""Reading records and computing the study's answer. Depends on the record schema only.

    from analysis import tables
    df = tables.trials("runs/default")                 # a row per trial (frames.trial_frame)
    tables.ratio_table(df, baseline="goal_only")       # matched ratios, intervals, Wilcoxon, win/tie/loss
    s = tables.summary("runs/default", "goal_only", activity=True)   # every table
    report.write("runs/default", "out/")               # CSV, Markdown, PNG plots, offline HTML

frames: records -> tidy frames (the one place that reads the store); stats: the estimator, its
interval, tests and power; tables: the counting rules and every table; plots; report.
"""
from analysis import frames, report, stats, tables

__all__ = ["frames", "report", "stats", "tables"]
