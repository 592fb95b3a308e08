"""`python -m analysis runs/<study> [--baseline goal_only] [--rejected-as 1.0|exclude] [--csv out.csv]`"""
import argparse
import sys
from pathlib import Path

from analysis import report, tables


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    p.add_argument("path", type=Path, help="a study directory (runs/<study>) or the whole store")
    p.add_argument("--baseline", default="goal_only", help="the arm every ratio divides by")
    p.add_argument("--rejected-as", default="1.0", help="what a rejected trial counts as: a speedup, or 'exclude'")
    p.add_argument("--csv", type=Path, help="also write the per-trial table here")
    a = p.parse_args(argv)
    if not a.path.exists():
        print(f"error: {a.path} does not exist; give a study directory such as runs/default", file=sys.stderr)
        return 2
    rejected_as = a.rejected_as if a.rejected_as == "exclude" else float(a.rejected_as)
    print(report.text(a.path, a.baseline, rejected_as))
    if a.csv:
        tables.trials(a.path).to_csv(a.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
