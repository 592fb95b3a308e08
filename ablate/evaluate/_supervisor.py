"""evaluate(): the supervisor. It checks the file, hands the request to a warm judge process,
starts the candidate once the judge is ready (forked from a warm zygote on CPU, a fresh
interpreter on GPU), hands the candidate's socket to the judge, watches the candidate (time
limit, memory limit, death, helper processes) and returns the judge's verdict. It runs in the
caller's process, so it imports nothing heavy (no torch) and runs no submitted code."""
from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from pathlib import Path

import operators
from ablate.errors import AblateError
from ablate.evaluate import _channel, _servers, _static
from ablate.evaluate._reasons import REASONS, VERSION
from ablate.evaluate._servers import EvaluatorFailure, shutdown

DEFAULT_TIMEOUT_S = {"cpu": 60.0, "cuda": 600.0}  # the candidate's run, from the moment the judge is ready
JUDGE_TIMEOUT_S = 3600.0  # ceilings and baselines on a cold cache (torch.compile) can take minutes
MAX_SUBMISSION_BYTES = 1 << 20

__all__ = ["EvaluatorFailure", "evaluate", "shutdown"]


def _memtotal_gb() -> float:
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        return kb / 2**20
    except (OSError, AttributeError):
        return 16.0


def _versions() -> dict:
    import importlib.metadata as md

    def v(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    return {"name": None, "torch": v("torch"), "triton": v("triton"), "driver": None, "cuda": None}


def _early(base: dict, code: str, message: str, start: float, passed=()) -> dict:
    """A rejection decided from the file alone: no process was started."""
    checks = {c: "fail" if c == code else "pass" if c in passed else "skip" for c in REASONS}
    return {**base, "verdict": "rejected", "reasons": [code], "details": {code: message}, "timing": "none",
            "device": _versions(), "ceilings": None, "checks": checks, "shapes": [], "geomean_speedup": None,
            "flags": [], "static_flags": [], "seconds": round(time.monotonic() - start, 3)}


def _operator_node(operator: str, operator_set: dict | None) -> dict | None:
    """How the judge loads the operator: the conf/operators node, if any. Registry operators
    need none (and are not imported here: no torch in this process); operators loaded from an
    external format carry their node in `source`."""
    if operator_set:
        return dict(operator_set)
    if operator in operators.REGISTRY:
        return None
    op = operators.get(operator)  # raises the one-line error listing the valid names
    return dict(op.source) or None


def read_submission(path: Path) -> tuple[bytes | None, str, str]:
    """(bytes, "", ""), or (None, reason, why) when the path is not a regular file of at most
    MAX_SUBMISSION_BYTES: no links followed, a FIFO or a device never waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return None, "missing_file", f"{path}: {(e.strerror or str(e)).lower()}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "missing_file", f"{path}: not a regular file"
        data = os.pread(fd, MAX_SUBMISSION_BYTES + 1, 0)
        if st.st_size > MAX_SUBMISSION_BYTES or len(data) > MAX_SUBMISSION_BYTES:
            return None, "file_too_large", f"{path}: {st.st_size} bytes; kernel.py may be at most {MAX_SUBMISSION_BYTES}"
        return data, "", ""
    finally:
        os.close(fd)


def evaluate(operator: str, submission: str | Path, shapes: str = "eval", seed: int | None = None,
             timing: bool = True, *, device: str = "auto", cuda_graph: bool = False, draws: int = 3,
             timeout_s: float | None = None, memory_limit_gb: float | None = None,
             operator_set: dict | None = None, progress=None, scan: bool = True) -> dict:
    """Judge `submission` (a kernel.py) for `operator` on a shape set. Returns the result dict
    (see the package docstring). Raises AblateError for bad arguments, EvaluatorFailure when the
    evaluator itself breaks; a broken submission is a verdict, never an exception.

    operator_set: the conf/operators node the operator came from, when it is not a plain
    registry operator (external baselines, KernelBench, FlashInfer); the evaluator's processes
    load it again. Operators loaded in this process with a `source` are found without it.
    progress: called with a line of text as the evaluation moves on (ceilings and baselines
    measured on a cold cache can take minutes; each shape as it is judged).
    scan: False skips the static forbidden-code scan, so tests can show the run-time guard
    stopping what the scan would have caught first."""
    start = time.monotonic()
    node = _operator_node(operator, operator_set)
    if device not in ("auto", "cpu", "cuda"):
        raise AblateError(f"unknown device {device!r}; valid devices: auto, cpu, cuda")
    if draws < 1:
        raise AblateError("draws must be at least 1")
    seed = int.from_bytes(os.urandom(8), "little") >> 1 if seed is None else int(seed)
    base = {"operator": operator, "shape_set": shapes, "submission_sha256": None, "seed": seed, "sandbox": None,
            "evaluator_version": VERSION}
    path = Path(submission)
    data, code, why = read_submission(path)
    if data is None:
        return _early(base, code, why, start, passed={"missing_file"} if code != "missing_file" else ())
    base["submission_sha256"] = hashlib.sha256(data).hexdigest()
    source = data.decode("utf-8", errors="replace")
    tree, err = _static.parse(source)
    if tree is None:
        return _early(base, "syntax_error", err, start, passed={"missing_file", "file_too_large"})
    if not _static.defines_kernel(tree, source):
        return _early(base, "no_kernel_function", "kernel.py defines no function named kernel", start,
                      passed={"missing_file", "file_too_large", "syntax_error"})
    req = dict(operator=operator, operator_node=node, shape_set=shapes, seed=seed, device=device, draws=draws,
               timing=bool(timing), cuda_graph=bool(cuda_graph), scan=bool(scan), source_bytes=len(data),
               cache_dir=os.environ.get("ABLATE_CACHE_DIR") or str(Path.home() / ".cache" / "ablate"))
    result = _run(data, base, req, timeout_s, memory_limit_gb, progress)
    result["seconds"] = round(time.monotonic() - start, 3)
    return result


def _use_zygote(device: str) -> bool:
    """Fork CPU candidates from a warm zygote (started alongside the judge) when no GPU is in
    sight. ABLATE_EVAL_ZYGOTE=0 gives every candidate a fresh interpreter, as on a GPU."""
    if os.environ.get("ABLATE_EVAL_ZYGOTE") == "0":
        return False
    return device == "cpu" or (device == "auto" and not os.path.exists("/dev/nvidiactl"))


def _run(data: bytes, base: dict, req: dict, timeout_s, memory_limit_gb, progress=None) -> dict:
    key = (req["device"], os.environ.get("CUDA_VISIBLE_DEVICES"))
    conf = _servers.confinement()
    zygote = _servers.ZYGOTES.acquire(key) if _use_zygote(req["device"]) else None
    judge = _servers.JUDGES.acquire(key)
    spare = None if zygote else _servers.SPARES.take(key, req["device"])  # importing torch already
    cand, judge_ok, zygote_ok = None, False, True
    source_fd = _channel.write_sealed("submission", [data])
    try:
        t0 = time.monotonic()  # before the send: the judge starts its setup on receiving it
        judge.send("request", fds=[source_fd], cfg=req)
        ready = _answer(judge, progress)
        if ready.get("kind") == "error":
            judge_ok = True  # a bad request; the judge itself is fine
            raise AblateError(ready["message"])
        dev = ready["device"]
        phases = {"judge_ready": time.monotonic() - t0,
                  **{f"judge_{k}": float(v) for k, v in (ready.get("setup_s") or {}).items()}}
        if zygote is not None and dev == "cpu":
            try:
                if zygote.inner is None:
                    zygote.start()
                cand = _servers.Forked(zygote, req["device"])
            except EvaluatorFailure:  # no warm start today: a fresh interpreter does the same job
                zygote_ok = False
        if cand is None:
            cand = spare or _servers.Spawned(req["device"])
            spare = None  # in use: no longer a spare to close
        (cand.work / "submission" / "kernel.py").write_bytes(data)  # a fresh directory: nothing stale beside it
        base["sandbox"] = cand.sandbox
        if conf.note:
            base["sandbox_note"] = conf.note
        judge.send("candidate", fds=[cand.judge_end.fileno()], inner=cand.inner, work=str(cand.work),
                   kit=f"{_servers.INNER_ROOT}/kit" if cand.sandbox == "bwrap" else str(_servers.kit()))
        cand.judge_end.close()
        cand.judge_end = None
        limit = float(timeout_s or DEFAULT_TIMEOUT_S[dev])
        mem_gb = float(memory_limit_gb or os.environ.get("ABLATE_EVAL_MEMORY_GB") or 0.5 * _memtotal_gb())
        go_t, timed_out, oom, helpers, pythons = time.monotonic(), False, False, set(), {}
        while (rc := cand.poll()) is None:
            if time.monotonic() - go_t > limit:
                timed_out = True
                break
            procs = cand.processes()
            if _servers.tree_rss(procs) > mem_gb * 2**30:
                oom = True
                break
            helpers |= _lasting_helpers(cand.helpers(), pythons, time.monotonic())
            if not judge.alive():
                raise EvaluatorFailure(f"the judge process died: {judge.log_tail()}")
            judge.progress(progress)
            time.sleep(0.02)
        if rc is None:
            cand.kill()
            deadline = time.monotonic() + 2
            while (rc := cand.poll()) is None and time.monotonic() < deadline:
                time.sleep(0.02)
        phases["candidate"] = time.monotonic() - go_t
        cand.kill()  # anything it left behind
        parent_killed = isinstance(cand, _servers.Forked) and not zygote.alive()
        zygote_ok = zygote_ok and not parent_killed
        judge.send("end", returncode=rc, timed_out=timed_out, oom=oom, limit_s=limit, parent_killed=parent_killed,
                   memory_limit_gb=round(mem_gb, 1), log_tail=cand.log_tail(), helpers=sorted(helpers))
        t1 = time.monotonic()
        msg = _answer(judge, progress)
        phases["judge_result"] = time.monotonic() - t1
        judge_ok = msg.get("kind") == "result"
        if not judge_ok:
            raise EvaluatorFailure(f"unexpected message from the judge: {msg!r:.300}")
        if isinstance(cand, _servers.Spawned):  # the next evaluation's candidate starts now, after the
            _servers.SPARES.refill(key, req["device"])  # timing, so its start-up cannot disturb it
        result = dict(msg["result"])
        # from the candidate's socket handed over to its import report: its start-up, unless a spare was ready
        phases["candidate_start"] = result.pop("candidate_start_s", None) or 0.0
        return {**base, **result, "phase_seconds": {k: round(v, 3) for k, v in phases.items()}}
    finally:
        _channel.close_all([source_fd])
        if spare is not None:  # taken but never started: the bad request ended it
            spare.close()
        if cand is not None:
            if os.environ.get("ABLATE_EVAL_KEEP"):
                print(f"ablate: evaluation directory kept: {cand.work}")
                cand.kill()
            else:
                cand.close()
        for pool, server, ok in ((_servers.JUDGES, judge, judge_ok), (_servers.ZYGOTES, zygote, zygote_ok)):
            if server is None:
                continue
            if ok and server.alive():
                pool.release(key, server)
            else:
                server.close()


HELPER_PYTHON_S = 0.1  # a second Python that is still one this long after it was seen is a helper


def _lasting_helpers(found, pythons: dict, now: float) -> set[str]:
    """The helpers of one look at the candidate's tree. Any other program counts at once; a second
    Python only once the same process is still a Python HELPER_PYTHON_S later: between fork and
    exec a compiler's subprocess (gcc, ptxas) is briefly a copy of the interpreter, and an honest
    kernel must not be rejected for the moment the supervisor looked. `pythons`: pid -> first seen."""
    out = set()
    for pid, exe, python in found:
        if not python:
            out.add(exe)
        elif now - pythons.setdefault(pid, now) >= HELPER_PYTHON_S:
            out.add(exe)
    return out


def _answer(judge, progress=None) -> dict:
    """The judge's next message that is not a progress line (those go to `progress`)."""
    while (msg := judge.says(JUDGE_TIMEOUT_S)).get("kind") == "progress":
        if progress is not None:
            progress(str(msg.get("message")))
    if msg.get("kind") == "failure":
        raise EvaluatorFailure(f"the judge process failed: {msg['message']}")
    return msg
