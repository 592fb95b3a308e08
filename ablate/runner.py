"""Run a study: expand the config into trials, skip those already stored, run the rest.

A rerun resumes: stored trials are skipped, and the temporary directories of runs that died are
kept under .incomplete (ablate.store). A trial whose attempt fails for a reason that is not the
agent's (ablate.record.failure_of: the model API down after its own retries, the evaluator broken,
the trial process lost, an unexpected crash) is tried again, up to `retries` more times; it never
becomes a record, so it never counts as a rejected kernel. An error the user must fix (a bad
config, a diverged replay) stops the study. Trials run one per GPU, each in a process of its own,
or in this process when there is one slot.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ablate import operators
from ablate import models
from ablate import preflight as agent_preflight
from ablate.errors import AblateError
from ablate.progress import StudyView
from ablate.record import TrialRecord, failure_of, retriable
from ablate.store import Store, problems
from ablate.trial import TrialSpec, run_trial
from ablate import ablations


class TrialsFailed(AblateError):
    """Some trials failed on every attempt; the others ran. `paths`: the records written."""

    def __init__(self, message: str, paths: list[Path], failures: dict[str, dict[str, Any]]):
        super().__init__(message)
        self.paths, self.failures = paths, failures


class _Failed(Exception):
    """An attempt that ended without a record: its failure, and the exception when there is one."""

    def __init__(self, failure: dict[str, Any], exc: BaseException | None = None):
        super().__init__(failure.get("message"))
        self.failure, self.exc = failure, exc


def plan(cfg: dict[str, Any]) -> list[TrialSpec]:
    """Specs for the config, after checking that every name in it exists. Each spec carries the
    node that loads its one operator again (operators.source_node), not the whole set."""
    ops = operators.load_set(cfg["operators"])  # registry names, or a KernelBench / FlashInfer source
    nodes = {}
    for op in ops:
        for which in ("public", "eval"):
            op.shape_set(cfg["operators"]["shapes"][which])
        nodes[op.name] = operators.source_node(op, cfg["operators"])
    return [dataclasses.replace(s, operator_set=nodes[s.operator]) for s in ablations.expand(cfg, list(nodes))]


def pending(cfg: dict[str, Any], store_root: Path | str, log=print) -> tuple[list[TrialSpec], list[TrialSpec]]:
    """(every spec of the study, those still to run): the resume check."""
    specs = plan(cfg)
    return specs, _todo(specs, Store(store_root), log)


def _todo(specs: list[TrialSpec], store: Store, log) -> list[TrialSpec]:
    """The specs not yet stored. A trial directory without its record (corrupt) is reported and
    skipped, never overwritten."""
    if not specs:
        return []
    done, broken = store.scan(specs[0].study)
    todo = []
    for s in specs:
        if s.trial_id in broken:
            log(f"skipped {store.trial_dir(s.study, s.trial_id)}: no record.json (move the directory away to rerun it)")
        elif s.trial_id not in done:
            todo.append(s)
    return todo


def config_dict(cfg) -> dict[str, Any]:
    """A composed Hydra config as the runner takes it: resolved, without the hydra node, the store
    an absolute path (jobs on other nodes, sweeps, any working directory find the same one)."""
    from omegaconf import OmegaConf, open_dict

    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.pop("hydra", None)
    out = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    out["store"] = os.path.abspath(str(out["store"]))
    return out


def preflight(specs: list[TrialSpec]) -> None:
    """Before the first trial, not halfway through a sweep: every model is reachable, and the
    agent's shell has the runner's Python with torch and triton (and the GPU), or one line says why."""
    for model_cfg in {s.model.get("name") or s.model.get("id"): s.model for s in specs}.values():
        models.preflight(model_cfg)
    agent_preflight.before_trials(specs)


def print_report(study_dir: Path | str, cfg: dict[str, Any], paths: list[Path] | None = None) -> None:
    """The study's tables, when it has records, then its report written to <study>/report and the
    lines saying where it is and how to write it again (analysis.report)."""
    from ablate.analysis import report

    study_dir = Path(study_dir)
    if not (paths or study_dir.is_dir()):
        return
    baseline, rejected_as = cfg["study"].get("baseline_arm"), (cfg.get("analysis") or {}).get("rejected_as")
    print(report.text(study_dir, baseline=baseline, rejected_as=rejected_as))
    again = f"python -m ablate.analysis {study_dir}" + (f" --baseline {baseline}" if baseline else "")
    try:
        index = report.write(study_dir, study_dir / "report", baseline, rejected_as, quiet=True)
    except Exception as e:  # noqa: BLE001 - the records are stored; the report can be written again
        print(f"\nreport: not written ({type(e).__name__}: {e}); to write it: {again}")
        return
    print(f"\nreport: {index} (tables: {index.parent / 'tables.md'}, CSV in {index.parent / 'tables'})")
    print(f"again, from the records alone: {again}")
    note = smoke_note(cfg)
    if note:
        print(note)


SMOKE_ON_A_GPU = ("note: on this GPU the kernels are timed on the operators' smoke shapes (microseconds: launch "
                  "overhead, not kernels), so their speedups and speed-of-light fractions are not comparable with "
                  "public/eval figures; for those: python -m ablate operators.shapes.public=public "
                  "operators.shapes.eval=eval")


def smoke_note(cfg: dict[str, Any], gpu: bool | None = None) -> str | None:
    """One line when the study's kernels are judged on smoke shapes on a GPU (this machine's, unless
    `gpu` says): figures that measure launches, not kernels."""
    if gpu is None:
        import torch

        gpu = torch.cuda.is_available()
    return SMOKE_ON_A_GPU if gpu and "smoke" in (cfg["operators"].get("shapes") or {}).values() else None


def gpu_slots(setting: Any) -> list[str | None]:
    """Which GPU each concurrent trial gets: 'auto' = every visible GPU, one trial each; an int =
    that many GPUs; on a machine without CUDA, one slot and no GPU."""
    import torch

    count = torch.cuda.device_count()
    if setting not in (None, "auto"):
        if int(setting) > max(count, 1):
            raise AblateError(f"parallel={setting} but only {count} GPU(s) are visible; use parallel=auto or fewer")
        count = int(setting) if count else 0
    return [str(i) for i in range(count)] or [None]


def run_study(cfg: dict[str, Any], store_root: Path, log=print, only: str | None = None,
              live: bool | None = None) -> list[Path]:
    """Run the study's missing trials; returns the record directories written (or, with `only`,
    that one trial's). Raises TrialsFailed at the end when some trial failed on every attempt.
    live: the rich view (default: when stderr is a terminal); else plain lines through `log`."""
    store = Store(store_root)
    specs = plan(cfg)
    # (room for checks that must pass before any trial runs)
    if specs:
        for path in store.clean_stale(specs[0].study):  # before the resume check
            log(f"kept the attempt of a run that died: {path}")
    todo = _todo(specs, store, log)
    if only is not None:
        specs = [s for s in specs if s.trial_id == only]
        if not specs:
            raise AblateError(f"no trial {only!r} in study {cfg['study']['name']!r}; trial ids look like "
                              f"<operator>--<arm>--<model>--s<seed>--<key> (the sweep lists its jobs)")
        todo = [s for s in todo if s.trial_id == only]
        if not todo:
            log(f"{only}: already stored in {store.trial_dir(specs[0].study, only)}")
            return [store.trial_dir(specs[0].study, only)] if store.exists(specs[0].study, only) else []
    elif len(todo) < len(specs):
        log(f"resuming: {len(specs) - len(todo)} of {len(specs)} trials already in {store.root / specs[0].study}")
    if not todo:
        return []
    note = smoke_note(cfg)
    if note:
        log(note)
    preflight(todo)
    slots = gpu_slots(cfg.get("parallel", "auto"))
    retries = int(cfg.get("retries", 2))
    retry_delay_s = float(cfg.get("retry_delay_s", 0.0))
    view = StudyView(len(specs), len(specs) - len(todo), min(len(slots), len(todo)), log, live)
    with view:
        if len(slots) > 1 and len(todo) > 1:
            paths = _run_parallel(todo, store, slots, log, view, retries, retry_delay_s)
        else:
            paths = []
            for i, spec in enumerate(todo, 1):
                path = _with_retries(spec, _label(i, len(todo), spec), _in_process(store), store, view,
                                     retries, retry_delay_s)
                paths += [path] if path else []
    _report_problems(store.root / todo[0].study, log)
    if view.gave_up:
        causes: dict[str, int] = {}
        for f in view.gave_up.values():
            key = f"{f.get('kind')}: {f.get('cause')}"
            causes[key] = causes.get(key, 0) + 1
        raise TrialsFailed(
            f"{len(view.gave_up)} trial(s) failed on all {retries + 1} attempts "
            f"({', '.join(f'{k} x{n}' for k, n in causes.items())}); what they paid for is kept in "
            f"{store.root / todo[0].study / '.incomplete'}; rerun the same command to retry them", paths, view.gave_up)
    return paths


def _label(i: int, n: int, spec: TrialSpec, gpu: str | None = None) -> str:
    model = spec.model.get("name") or spec.model.get("id")
    return f"[{i}/{n}] {spec.operator} {spec.arm} {model} seed={spec.seed}" + ("" if gpu is None else f" gpu={gpu}")


def _report_problems(study_dir: Path, log) -> None:
    """Refresh the study's index; say which trial directories are corrupt (they are skipped)."""
    for d, err in problems(study_dir):
        log(f"skipped {d}: {err} (fix it, or move the directory out of the study)")


def _with_retries(spec: TrialSpec, label: str, run_once, store: Store, view: StudyView, retries: int,
                  retry_delay_s: float) -> Path | None:
    """Run a trial, trying again after a failure that is not the user's; None when every attempt
    failed (noted in view.gave_up). A user error is raised at once."""
    earlier = store.failures(spec.study, spec.trial_id)
    for n in range(retries + 1):
        attempt = len(earlier) + 1
        view.start(spec.trial_id, label + (f" attempt {attempt}" if attempt > 1 else ""))
        start = time.monotonic()
        try:
            path = run_once(spec, attempt, list(earlier), view)
        except _Failed as f:
            failure = f.failure
            earlier.append(failure)
            again = retriable(failure) and n < retries
            view.attempt_failed(spec.trial_id, f"{label}: attempt {attempt} failed ({failure.get('kind')}: "
                                f"{failure.get('cause')}) {str(failure.get('message'))[:300]}"
                                + ("; trying again" if again else ""), retrying=again)
            if not retriable(failure):
                raise f.exc if isinstance(f.exc, AblateError) else AblateError(str(failure.get("message"))) from None
            if not again:
                view.gave_up[spec.trial_id] = failure
                return None
            time.sleep(retry_delay_s)
            continue
        rec = TrialRecord.from_dict(json.loads((path / "record.json").read_text()), path=path)
        view.finish(spec.trial_id, _outcome(label, rec, start), int(rec.usage.get("total_tokens") or 0),
                    float(rec.usage.get("cost_usd") or 0.0))
        return path
    return None


def _outcome(label: str, rec: TrialRecord, start: float) -> str:
    speed = rec.evaluation.get("geomean_speedup")
    reasons = ",".join(rec.evaluation.get("reasons") or [])
    return (f"{label}: {rec.end_reason}, {rec.verdict}" + (f" ({reasons})" if reasons else "")
            + (f" {speed:.3g}x vs best library ({rec.evaluation.get('timing')})" if speed else "")
            + f" [{time.monotonic() - start:.0f}s] -> {rec.path}")


def _in_process(store: Store):
    def run_once(spec: TrialSpec, attempt: int, failures: list, view: StudyView) -> Path:
        def progress(result):
            view.turn(spec.trial_id, result.turns, result.usage.total_tokens, result.usage.cost_usd)

        try:
            return run_trial(spec, store, progress=progress, attempt=attempt, failures=failures)
        except Exception as e:  # KeyboardInterrupt / SystemExit (a signal) stop the study instead
            raise _Failed(failure_of(e), e) from e

    return run_once


def _die_with_parent() -> None:
    """In the trial process: end with the runner (kill -9 of the runner must not leave trials
    running on that a rerun would start again); the attempt is then kept as a dead run's."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass


def _in_subprocess(store: Store, gpu: str | None):
    """Run the attempt in `python -m ablate.trial`, pinned to `gpu`, reading its progress lines."""
    import subprocess
    import tempfile
    from dataclasses import asdict

    def run_once(spec: TrialSpec, attempt: int, failures: list, view: StudyView) -> Path:
        with tempfile.TemporaryDirectory(prefix="ablate-trial-") as tmp:
            (Path(tmp) / "spec.json").write_text(json.dumps(asdict(spec), default=str))
            (Path(tmp) / "failures.json").write_text(json.dumps(failures, default=str))
            env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}))
            with open(Path(tmp) / "stderr", "w+") as err:
                proc = subprocess.Popen([sys.executable, "-m", "ablate.trial", str(Path(tmp) / "spec.json"),
                                         str(store.root), str(attempt), str(Path(tmp) / "failures.json")],
                                        env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                        preexec_fn=_die_with_parent)
                path, failure = None, None
                for line in proc.stdout:
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue  # something else printed to stdout
                    if event.get("event") == "turn":
                        view.turn(spec.trial_id, event["turns"], event["tokens"], event["cost_usd"])
                    elif event.get("event") == "done":
                        path = Path(event["path"])
                    elif event.get("event") == "failed":
                        failure = event["failure"]
                rc = proc.wait()
                err.seek(0)
                last = (err.read().strip().splitlines() or ["(no output)"])[-1]
        if rc == 0 and path is not None:
            return path
        if failure is None:  # died without a word (kill -9, out of memory): its directory is stale now
            store.clean_stale(spec.study)
            how = f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"
            failure = {"kind": "infrastructure", "cause": "node_lost",
                       "message": f"trial process on GPU {gpu} ended ({how}): {last}"}
        raise _Failed(failure, AblateError(last.removeprefix("error: ")) if rc == 2 else None)

    return run_once


def _run_parallel(todo: list[TrialSpec], store: Store, slots: list[str | None], log, view: StudyView | None = None,
                  retries: int = 0, retry_delay_s: float = 0.0) -> list[Path]:
    """One trial per GPU at a time, each in its own process pinned to its GPU. A user error stops
    new trials from starting and is raised once the running ones end."""
    import queue
    import threading
    from concurrent.futures import ThreadPoolExecutor

    view = view or StudyView(len(todo), 0, len(slots), log, live=False)
    free: queue.Queue = queue.Queue()
    for s in slots:
        free.put(s)
    stop, errors = threading.Event(), []

    def one(i_spec):
        i, spec = i_spec
        if stop.is_set():
            return None
        gpu = free.get()
        try:
            if stop.is_set():
                return None
            return _with_retries(spec, _label(i, len(todo), spec, gpu), _in_subprocess(store, gpu), store, view,
                                 retries, retry_delay_s)
        except AblateError as e:
            stop.set()
            errors.append(e)
            return None
        finally:
            free.put(gpu)

    with ThreadPoolExecutor(len(slots)) as pool:
        paths = [p for p in pool.map(one, enumerate(todo, 1)) if p]
    if errors:
        raise errors[0]
    return paths
