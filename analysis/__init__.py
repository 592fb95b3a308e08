"""Reading records and computing the study's answer. Depends on the record schema only.

    from ablate.analysis import tables, report
    df = tables.trials("runs/smoke")                    # a row per trial (frames.trial_frame)
    tables.ratio_table(df, baseline="goal_only")        # matched ratios: both scores, both intervals, Holm, wins
    s = tables.summary("runs/smoke", "goal_only", activity=True, evaluation="latest")   # every table
    print(report.render(s))                             # what `python -m ablate.analysis runs/smoke` prints
    report.write("runs/smoke", "out/")                  # CSV, Markdown, PNG plots, offline HTML

frames: records -> tidy frames (the one place that reads the store); scoring: the scoring rule
(produced, fallback) and the grouping; stats: the estimator, its two intervals, Holm, power;
tables: every table of arms and matched ratios; measures: the paper's other measures; views:
the tables for reading; report: the words around them and the files; pages: the HTML; plots.
"""
from ablate.analysis import frames, report, scoring, stats, tables

__all__ = ["frames", "report", "scoring", "stats", "tables"]
