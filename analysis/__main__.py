"""`python -m analysis runs/<study> [--baseline goal_only] [--rejected-as 1.0|exclude] [--out DIR] [--quiet]`

Prints the tables and writes them (CSV and Markdown), the plots (PNG) and an offline HTML report
with a page per trial to DIR (default: <study>/report).
"""
import argparse
import sys
from pathlib import Path

from analysis import report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path, help="a study directory (runs/<study>) or the whole store")
    p.add_argument("--baseline", default="goal_only", help="the arm every ratio divides by")
    p.add_argument("--rejected-as", default="1.0", help="what a trial not accepted counts as: a speedup, or 'exclude'")
    p.add_argument("--out", type=Path, help="where the report goes (default: PATH/report)")
    p.add_argument("--no-files", action="store_true", help="print the tables only")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    a = p.parse_args(argv)
    if not a.path.exists():
        print(f"error: {a.path} does not exist; give a study directory such as runs/default", file=sys.stderr)
        return 2
    try:
        rejected_as = a.rejected_as if a.rejected_as == "exclude" else float(a.rejected_as)
    except ValueError:
        print(f"error: --rejected-as {a.rejected_as!r} is neither a speedup (e.g. 1.0) nor 'exclude'", file=sys.stderr)
        return 2
    print(report.text(a.path, a.baseline, rejected_as))
    if not a.no_files:
        index = report.write(a.path, a.out or a.path / "report", a.baseline, rejected_as, quiet=a.quiet)
        print(f"\nreport: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
