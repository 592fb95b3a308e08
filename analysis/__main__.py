"""`python -m ablate.analysis [runs/<study>] [--baseline ARM] [--evaluation original|latest|VERSION] [--out DIR] [--no-files] [--quiet]`

Prints the headline, the matched ratios and the arms' tables of a study, and writes every table
(CSV and Markdown), the plots (PNG) and an offline HTML report with a page per trial to DIR
(default: <study>/report). PATH defaults to runs/smoke, where the default study
(`python -m ablate`) writes; --baseline defaults to goal_only when the study has it.

Every trial is scored by one rule, shown as two figures: produced (the speedup of the accepted
kernel; a trial without one counts in the correctness rate) and fallback (max(produced, 1), 1.0x
without one). Each figure has two 95% intervals: over these operators, and over operators like
these (a random effect). --evaluation picks the original judgement, the latest rescoring
(python -m ablate.rescore), or the newest one by an evaluator version.
"""
import argparse
import difflib
import sys
from pathlib import Path

DEFAULT_STUDY = Path("runs/smoke")  # conf/config.yaml: store runs, study smoke


def _no_study(path: Path) -> str:
    """One line: the path is not there, and the studies that are, nearest first."""
    parent = path.parent if path.parent.is_dir() else None
    studies = sorted(p.name for p in parent.iterdir() if p.is_dir() and not p.name.startswith(".")
                     and ((p / "index.parquet").is_file() or any(p.glob("*/record.json")))) if parent else []
    near = difflib.get_close_matches(path.name, studies, n=max(1, len(studies)), cutoff=0.0)
    if near:
        return (f"{path} does not exist; did you mean {parent / near[0]}? (studies under {parent}: {', '.join(near)})")
    return f"{path} does not exist; give a study directory (python -m ablate writes runs/<study>, e.g. {DEFAULT_STUDY})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.analysis", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path, nargs="?", default=DEFAULT_STUDY,
                   help=f"a study directory (runs/<study>) or the whole store (default: {DEFAULT_STUDY})")
    p.add_argument("--baseline", help="the arm every ratio divides by (default: goal_only when the study has it)")
    p.add_argument("--evaluation", default="latest",
                   help="which evaluation of each trial: original, latest (the newest rescoring, else the original; "
                        "the default) or an evaluator version")
    p.add_argument("--out", type=Path, help="where the report goes (default: PATH/report)")
    p.add_argument("--no-files", action="store_true", help="print the tables only")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    a = p.parse_args(argv)

    def fail(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return 2

    if not a.path.exists():
        return fail(_no_study(a.path))
    from ablate.analysis import report, tables

    s = tables.summary(a.path, a.baseline or "goal_only", activity=not a.no_files, evaluation=a.evaluation)
    df = s["trials"]
    if df.empty and not s["skipped"]:
        every = [tables.trials(a.path, which) for which in ("original", "latest")]
        if a.evaluation not in ("latest", "original") and not every[0].empty:
            versions = sorted({str(v) for t in every for v in t["evaluator_version"].dropna()})
            return fail(f"no trial under {a.path} has an evaluation by evaluator version {a.evaluation!r}; "
                        f"versions there: {', '.join(versions) or 'none recorded'} (or original, latest)")
        return fail(f"no trial records under {a.path}; a study directory holds <trial>/record.json "
                    f"(python -m ablate writes them under runs/<study>)")
    arms = sorted(set(df["arm"]) | set(df["arm_name"])) if not df.empty else []
    if a.baseline and a.baseline not in arms:
        near = difflib.get_close_matches(a.baseline, arms, n=1)
        return fail(f"no arm {a.baseline!r} in {a.path}" + (f" (did you mean {near[0]}?)" if near else "")
                    + f"; arms: {', '.join(arms)}")
    print(report.render(s))
    if not a.no_files:
        index = report.write_summary(s, a.out or a.path / "report", quiet=a.quiet)
        print(f"\nreport: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
