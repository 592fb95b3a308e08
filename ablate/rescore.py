"""`python -m ablate.rescore runs/<study> [--shapes SET] [--trial ID ...] [--force] [--snapshots]`

Re-judges the stored submissions of a study with the evaluator and GPU of this machine, without
running any agent: each trial's kernel.py (or its absence: a no-submission trial is rejected
again, so that it still counts under the new evaluation) goes through ablate.evaluate with the
operator its record resolves. The new evaluation is stored beside the original, in
<trial>/evaluations/<time>--<evaluator version>--<device>.json; nothing is overwritten.
Analysis picks one: ablate.store.read_records(path, evaluation="latest" | "original" | <version>).

--snapshots judges instead the copies of kernel.py each trial took along the way
(ablate.snapshots), on the trial's public shapes, with the same evaluator; each judgement goes to
<trial>/snapshots/evaluations/, and the record and its final evaluation are left as they are.
Analysis then draws them as best-so-far points, for every arm alike.

A trial (or snapshot) already judged by this evaluator version on this device (and shape set)
is skipped unless --force. Exit status: 0 when every trial was judged or skipped, 1 when some could not be
(the evaluator failed, or the operator no longer resolves), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ablate import snapshots
from ablate.errors import AblateError
from ablate.record import TrialRecord
from ablate.store import Store, read_records


def evaluator_version() -> str | None:
    """The installed evaluator's version, when it says before judging anything."""
    import ablate.evaluate as ev

    return (getattr(ev, "EVALUATOR_VERSION", None) or getattr(ev, "VERSION", None)
            or getattr(ev, "__version__", None))


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


def _select(path: Path | str, trials: list[str] | None, log) -> tuple[list[TrialRecord], dict[str, Any], str | None]:
    """The records to judge (all under `path`, or the named trials), this machine's environment
    and the evaluator's version."""
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
    if version is None:
        log("note: the evaluator does not state its version before judging, so nothing is skipped as already judged")
    return records, env, version


def rescore(path: Path | str, shapes: str | None = None, trials: list[str] | None = None, force: bool = False,
            log=print) -> tuple[int, int, list[tuple[str, str]]]:
    """Rescore every trial under `path`; returns (judged, skipped, [(trial id, why it failed)])."""
    from ablate.evaluate import EvaluatorFailure

    records, env, version = _select(path, trials, log)
    device = env["gpu"] or "cpu"
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
        name = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%f}--{snapshots.slug(entry['evaluator_version'] or 'unversioned')}--{snapshots.slug(device)}"
        Store(rec.path.parent.parent).add_rescoring(rec.path, entry, name)
        judged += 1
        new = entry["evaluation"]
        speed = new.get("geomean_speedup")
        log(f"{label}: {new.get('verdict')}" + (f" {speed:.3g}x" if speed else "")
            + f" (was {rec.verdict}" + (f" {rec.evaluation.get('geomean_speedup'):.3g}x" if rec.evaluation.get("geomean_speedup") else "")
            + ")" + (" [the operator's files changed since the trial]" if entry["operator_changed"] else ""))
    return judged, skipped, failed


def judge_snapshot(rec: TrialRecord, snap: dict[str, Any], shape_set: str, env: dict[str, Any],
                   version: str | None) -> dict[str, Any]:
    """The trusted evaluator's judgement of one stored snapshot, as stored beside it. The file is
    the runner's copy in the trial directory (never the workspace), and must still hash to what the
    record says was taken."""
    import hashlib

    from ablate.evaluate import evaluate

    path = rec.path / snapshots.FOLDER / snap["file"]
    try:
        data = path.read_bytes() if not path.is_symlink() else None
    except OSError:
        data = None
    if data is None or hashlib.sha256(data).hexdigest() != snap["sha256"]:
        raise AblateError(f"{path}: missing or changed since the trial took it (sha256 differs from the record)")
    result = evaluate(rec.operator, path, shapes=shape_set, operator_set=rec.operator_source or None)
    return {"snapshot": dict(snap), "evaluation": result, "evaluator_version": result.get("evaluator_version", version),
            "device": env["gpu"] or "cpu", "shape_set": shape_set, "environment": env,
            "judged_at": datetime.now(timezone.utc).isoformat()}


def rescore_snapshots(path: Path | str, shapes: str | None = None, trials: list[str] | None = None,
                      force: bool = False, log=print) -> tuple[int, int, list[tuple[str, str]]]:
    """Judge every stored snapshot of the trials under `path` on each trial's public shapes (or
    `shapes`); returns (judged, skipped, [(trial id/snapshot, why it failed)])."""
    from ablate.evaluate import EvaluatorFailure
    from ablate.store import write_atomic

    records, env, version = _select(path, trials, log)
    device = env["gpu"] or "cpu"
    judged, skipped, failed = 0, 0, []
    for i, rec in enumerate(records, 1):
        taken = snapshots.taken(rec.snapshots)
        label = f"[{i}/{len(records)}] {rec.trial_id}"
        if not taken:
            log(f"{label}: no snapshots" + ("" if rec.snapshots else " (recorded before snapshots were taken)"))
            continue
        shape_set = shapes or rec.shapes.get("public") or "public"
        folder = rec.path / snapshots.FOLDER / snapshots.JUDGED
        for j, snap in enumerate(taken, 1):
            where = f"{label} {snap['file']} ({j}/{len(taken)}, turn {snap.get('turn')})"
            target = folder / snapshots.judgement_name(snap, version, device, shape_set)
            if not force and version is not None and target.is_file():
                skipped += 1
                log(f"{where}: already judged by evaluator {version} on {device}")
                continue
            try:
                entry = judge_snapshot(rec, snap, shape_set, env, version)
            except (AblateError, EvaluatorFailure) as e:
                failed.append((f"{rec.trial_id}/{snap['file']}", str(e)))
                log(f"{where}: not judged: {e}")
                continue
            folder.mkdir(parents=True, exist_ok=True)
            # named by the version the evaluator reported, so a rerun finds it
            write_atomic(folder / snapshots.judgement_name(snap, entry["evaluator_version"], device, shape_set),
                         json.dumps(entry, indent=1, default=str).encode())
            judged += 1
            ev = entry["evaluation"]
            speed = ev.get("geomean_speedup")
            log(f"{where}: {ev.get('verdict')}" + (f" {speed:.3g}x" if speed else "")
                + (f" {','.join(ev.get('reasons') or [])}" if ev.get("reasons") else ""))
    return judged, skipped, failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ablate.rescore", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path, help="a study directory (runs/<study>), the whole store, or one trial directory")
    p.add_argument("--shapes", help="shape set to judge on (default: each trial's own eval set)")
    p.add_argument("--trial", action="append", help="only this trial id (repeatable)")
    p.add_argument("--force", action="store_true", help="judge again even if this evaluator version already did here")
    p.add_argument("--snapshots", action="store_true",
                   help="judge the snapshots of kernel.py taken along each trial (public shapes), not the final kernel")
    a = p.parse_args(argv)
    if not a.path.exists():
        print(f"error: {a.path} does not exist; give a study directory such as runs/default", file=sys.stderr)
        return 2
    try:
        judged, skipped, failed = (rescore_snapshots if a.snapshots else rescore)(a.path, a.shapes, a.trial, a.force)
    except AblateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        from ablate.evaluate import shutdown

        shutdown()
    print(f"{'judged snapshots' if a.snapshots else 'rescored'} {judged}, skipped {skipped}, failed {len(failed)}")
    for trial_id, why in failed:
        print(f"error: {trial_id}: {why}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
