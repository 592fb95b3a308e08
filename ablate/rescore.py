"""`python -m ablate.rescore runs/<study> [--shapes SET] [--trial ID ...] [--force]`

Re-judges the stored submissions of a study with the evaluator and GPU of this machine, without
running any agent: each trial's kernel.py (or its absence: a no-submission trial is rejected
again, so that it still counts under the new evaluation) goes through ablate.evaluate with the
operator its record resolves. The new evaluation is stored beside the original, in
<trial>/evaluations/<time>--<evaluator version>--<device>.json; nothing is overwritten.
Analysis picks one: ablate.store.read_records(path, evaluation="latest" | "original" | <version>).

A trial already rescored by this evaluator version on this device (and shape set) is skipped
unless --force. Exit status: 0 when every trial was judged or skipped, 1 when some could not be
(the evaluator failed, or the operator no longer resolves), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.record import TrialRecord
from ablate.store import Store, read_records


def evaluator_version() -> str | None:
    """The installed evaluator's version, when it says before judging anything."""
    import ablate.evaluate as ev

    return getattr(ev, "EVALUATOR_VERSION", None) or getattr(ev, "__version__", None)


def _slug(text: Any) -> str:
    return re.sub(r"[^0-9A-Za-z._-]+", "_", str(text)).strip("_") or "none"


def _already(rec: TrialRecord, version: str | None, device: str, shape_set: str) -> bool:
    return version is not None and any(
        r.get("evaluator_version") == version and r.get("device") == device and r.get("shape_set") == shape_set
        for r in rec.rescorings)


def rescore_one(rec: TrialRecord, shape_set: str, env: dict[str, Any], version: str | None) -> dict[str, Any]:
    """The new evaluation of one stored trial, as stored beside the original."""
    from ablate.evaluate import evaluate
    from ablate.trial import operator_files

    op = rec.resolve_operator()  # from the record alone; raises AblateError when it no longer loads
    changed = bool(rec.operator_files) and operator_files(op) != rec.operator_files
    kernel = rec.path / "kernel.py"
    if kernel.is_file():
        result = evaluate(rec.operator, kernel, shapes=shape_set, operator_set=rec.operator_source or None)
    else:
        result = {"verdict": "rejected", "reasons": ["no_submission"], "shapes": [], "timing": "none",
                  "evaluator_version": version}
    return {"evaluation": result, "evaluator_version": result.get("evaluator_version", version),
            "device": env["gpu"] or "cpu", "shape_set": shape_set, "environment": env,
            "rescored_at": datetime.now(timezone.utc).isoformat(), "operator_changed": changed,
            "original": {"verdict": rec.verdict, "evaluator_version": rec.evaluator_version,
                         "geomean_speedup": rec.evaluation.get("geomean_speedup")}}


def rescore(path: Path | str, shapes: str | None = None, trials: list[str] | None = None, force: bool = False,
            log=print) -> tuple[int, int, list[tuple[str, str]]]:
    """Rescore every trial under `path`; returns (judged, skipped, [(trial id, why it failed)])."""
    from ablate.evaluate import EvaluatorFailure
    from ablate.trial import environment

    records = read_records(path, evaluation="original")  # corrupt directories are reported and skipped
    if trials:
        unknown = sorted(set(trials) - {r.trial_id for r in records})
        if unknown:
            raise AblateError(f"no trial {', '.join(unknown)} under {path}")
        records = [r for r in records if r.trial_id in set(trials)]
    if not records:
        raise AblateError(f"no trial records under {path}; give a study directory such as runs/default")
    env, version = environment(), evaluator_version()
    device = env["gpu"] or "cpu"
    if version is None:
        log("note: the evaluator does not state its version before judging, so no trial is skipped as already rescored")
    judged, skipped, failed = 0, 0, []
    for i, rec in enumerate(records, 1):
        shape_set = shapes or rec.shapes.get("eval") or "eval"
        label = f"[{i}/{len(records)}] {rec.trial_id}"
        if not force and _already(rec, version, device, shape_set):
            skipped += 1
            log(f"{label}: already rescored by evaluator {version} on {device}")
            continue
        try:
            entry = rescore_one(rec, shape_set, env, version)
        except (AblateError, EvaluatorFailure) as e:
            failed.append((rec.trial_id, str(e)))
            log(f"{label}: not rescored: {e}")
            continue
        name = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%f}--{_slug(entry['evaluator_version'] or 'unversioned')}--{_slug(device)}"
        Store(rec.path.parent.parent).add_rescoring(rec.path, entry, name)
        judged += 1
        new = entry["evaluation"]
        speed = new.get("geomean_speedup")
        log(f"{label}: {new.get('verdict')}" + (f" {speed:.3g}x" if speed else "")
            + f" (was {rec.verdict}" + (f" {rec.evaluation.get('geomean_speedup'):.3g}x" if rec.evaluation.get("geomean_speedup") else "")
            + ")" + (" [the operator's files changed since the trial]" if entry["operator_changed"] else ""))
    return judged, skipped, failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.rescore", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path, help="a study directory (runs/<study>), the whole store, or one trial directory")
    p.add_argument("--shapes", help="shape set to judge on (default: each trial's own eval set)")
    p.add_argument("--trial", action="append", help="only this trial id (repeatable)")
    p.add_argument("--force", action="store_true", help="judge again even if this evaluator version already did here")
    a = p.parse_args(argv)
    if not a.path.exists():
        print(f"error: {a.path} does not exist; give a study directory such as runs/default", file=sys.stderr)
        return 2
    try:
        judged, skipped, failed = rescore(a.path, a.shapes, a.trial, a.force)
    except AblateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        from ablate.evaluate import shutdown

        shutdown()
    print(f"rescored {judged}, skipped {skipped}, failed {len(failed)}")
    for trial_id, why in failed:
        print(f"error: {trial_id}: {why}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
