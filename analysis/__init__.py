"""Reading records and computing the study's answer. Depends on the record schema only.

    from analysis import tables
    df = tables.trials("runs/default")
    tables.ratio_table(df, baseline="goal_only")
"""
from analysis import report, tables

__all__ = ["report", "tables"]
