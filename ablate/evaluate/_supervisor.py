"""evaluate(): the supervisor. It checks the file, hands the request to a warm judge process,
takes a fresh candidate interpreter (a spare started ahead, or one started now while the judge
sets up: on CPU as on GPU, one sandbox per evaluation), writes kernel.py into its evaluation
directory once the judge is ready, hands the candidate's socket to the judge, watches the
candidate (time limit, memory limit counting its private tmpfs, death, helper processes), kills
its whole sandbox and returns the judge's verdict. A judge that fails because of what the
candidate sent it says so ("cause": "candidate"): that is a rejection (protocol_violation), not
an evaluator failure. It runs in the caller's process, so it imports nothing heavy (no torch) and
runs no submitted code."""
from __future__ import annotations

import hashlib
import os
import re
import stat
import time
from pathlib import Path

from ablate import operators
from ablate.errors import AblateError
from ablate.evaluate import _channel, _kit, _servers, _static
from ablate.evaluate._reasons import REASONS, VERSION
from ablate.evaluate._kit import EvaluatorFailure
from ablate.evaluate._servers import shutdown

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
             timing: bool = True, *, device: str = "auto", draws: int = 3,
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
               timing=bool(timing), scan=bool(scan), source_bytes=len(data),
               # read per evaluation: the judge is a warm process whose environment is its first caller's
               only_baselines=[n for n in (os.environ.get("ABLATE_EVAL_BASELINES") or "").split(",") if n],
               cache_dir=os.environ.get("ABLATE_CACHE_DIR") or str(Path.home() / ".cache" / "ablate"))
    result = _run(data, base, req, timeout_s, memory_limit_gb, progress)
    result["seconds"] = round(time.monotonic() - start, 3)
    return result


def _run(data: bytes, base: dict, req: dict, timeout_s, memory_limit_gb, progress=None) -> dict:
    key = (req["device"], os.environ.get("CUDA_VISIBLE_DEVICES"))
    conf = _kit.confinement()
    judge = _servers.JUDGES.acquire(key)
    cand = _servers.SPARES.take(key, req["device"])  # importing torch already, or from now, beside the judge
    judge_ok, phases = False, {}
    source_fd = _channel.write_sealed("submission", [data])
    try:
        t0 = time.monotonic()  # before the send: the judge starts its setup on receiving it
        judge.send("request", fds=[source_fd], cfg=req)
        ready = _answer(judge, progress)
        if ready.get("kind") == "error":
            judge_ok = True  # a bad request; the judge itself is fine
            raise AblateError(ready["message"])
        if ready.get("kind") == "failure":
            raise EvaluatorFailure(f"the judge process failed: {ready.get('message')}")
        dev = ready["device"]
        phases = {"judge_ready": time.monotonic() - t0,
                  **{f"judge_{k}": float(v) for k, v in (ready.get("setup_s") or {}).items()}}
        cand.submit(data)
        base["sandbox"] = cand.sandbox
        if conf.note:
            base["sandbox_note"] = conf.note
        judge.send("candidate", fds=[cand.judge_end.fileno()], inner=cand.inner, work=str(cand.work),
                   kit=f"{_kit.INNER_ROOT}/kit" if cand.sandbox == "bwrap" else str(_kit.kit()))
        cand.judge_end.close()
        cand.judge_end = None
        if dev == "cpu":  # no device timing to disturb: the next candidate starts now, beside this one
            _servers.SPARES.refill(key, req["device"])
        limit = float(timeout_s or DEFAULT_TIMEOUT_S[dev])
        mem_gb = float(memory_limit_gb or os.environ.get("ABLATE_EVAL_MEMORY_GB") or 0.5 * _memtotal_gb())
        go_t, timed_out, oom, helpers, pythons = time.monotonic(), False, False, set(), {}
        while (rc := cand.poll()) is None:
            if time.monotonic() - go_t > limit:
                timed_out = True
                break
            procs = cand.processes()
            if _servers.tree_rss(procs) + cand.private_bytes() > mem_gb * 2**30:
                oom = True
                break
            helpers |= _lasting_helpers(cand.helpers(), pythons, time.monotonic())
            judge.progress(progress)
            if _blamed(judge.pending) or not judge.alive():
                break  # the judge gave up on this candidate, or died: see below
            time.sleep(0.02)
        if rc is None:
            cand.kill()
            rc = cand.poll()
        phases["candidate"] = time.monotonic() - go_t
        cand.kill()  # anything it left behind: its whole sandbox
        judge.progress(progress)  # what the judge said before it stopped, if it did
        if (blame := _blamed(judge.pending)) is not None:
            return _protocol_violation(base, blame, phases)
        if not judge.alive():
            said = [m for m in judge.pending if m.get("kind") == "failure"]
            raise EvaluatorFailure(f"the judge process failed: {said[0].get('message')}" if said else
                                   f"the judge process died: {judge.log_tail()}")
        judge.send("end", returncode=rc, timed_out=timed_out, oom=oom, limit_s=limit,
                   memory_limit_gb=round(mem_gb, 1), log_tail=cand.log_tail(), helpers=sorted(helpers))
        t1 = time.monotonic()
        msg = _answer(judge, progress)
        phases["judge_result"] = time.monotonic() - t1
        if _blamed([msg]) is not None:
            return _protocol_violation(base, msg, phases)
        judge_ok = msg.get("kind") == "result"
        if not judge_ok:
            raise EvaluatorFailure(f"unexpected message from the judge: {msg!r:.300}")
        # on a GPU the next evaluation's candidate starts now, after the timing, so its start-up cannot disturb it
        _servers.SPARES.refill(key, req["device"])
        result = dict(msg["result"])
        # from the candidate's socket handed over to its import report: its start-up, unless a spare was ready
        phases["candidate_start"] = result.pop("candidate_start_s", None) or 0.0
        return {**base, **result, "phase_seconds": {k: round(v, 3) for k, v in phases.items()}}
    finally:
        _channel.close_all([source_fd])
        if os.environ.get("ABLATE_EVAL_KEEP"):
            print(f"ablate: evaluation directory kept: {cand.work}")
            cand.kill()
        else:
            cand.close()
        if judge_ok and judge.alive():
            _servers.JUDGES.release(key, judge)
        else:
            judge.close()


def _blamed(messages) -> dict | None:
    """The judge's failure message that names the candidate as its cause, if any."""
    for m in messages:
        if m.get("kind") == "failure" and m.get("cause") == "candidate":
            return m
    return None


def _protocol_violation(base: dict, msg: dict, phases: dict) -> dict:
    """The judge broke on what the candidate sent it: the candidate's rejection, never an
    evaluator failure (a runner would retry that as infrastructure)."""
    why = str(msg.get("message") or "the judge could not read what the candidate sent")[-4000:]
    checks = {c: "fail" if c == "protocol_violation" else "skip" for c in REASONS}
    return {**base, "verdict": "rejected", "reasons": ["protocol_violation"], "details": {"protocol_violation": why},
            "timing": "none", "device": _versions(), "ceilings": None, "checks": checks, "shapes": [],
            "geomean_speedup": None, "flags": [], "static_flags": [],
            "phase_seconds": {k: round(v, 3) for k, v in phases.items()}}


# How long a process may be seen in the candidate's tree before it is a helper, by kind
# (_servers.helpers): any other program, and a Python exec'd with a command line of its own, at
# once; a copy of the candidate's interpreter (its command line, or none readable: the candidate is
# not dumpable, nor its children until they exec) only once the same process is still there 1 s
# later (between fork and exec a compiler's subprocess, gcc or ptxas, is briefly such a copy, and
# an honest kernel must not be rejected for the moment the supervisor looked: with two test suites
# on two cores, torch.compile's kernel outlived 0.1 s). The grace is for copies alone: a helper
# Python given it went unseen whenever the evaluation ended within the second, as a copy still
# does (one running a pre-exec function; docs/evaluator.md). torch.compile's load checks (a Python
# that only dlopens a file) for 10 s from the first one seen, all of them together: a chain of
# short-lived "probes" gets no more.
GRACE_S = {"program": 0.0, "python": 0.0, "copy": 1.0, "probe": 10.0}


def _lasting_helpers(found, pythons: dict, now: float) -> set[str]:
    """The helpers of one look at the candidate's tree. `pythons`: pid (every probe: "probe") ->
    first seen."""
    out = set()
    for pid, exe, kind in found:
        if now - pythons.setdefault("probe" if kind == "probe" else pid, now) >= GRACE_S[kind]:
            out.add(exe)
    return out


def _answer(judge, progress=None) -> dict:
    """The judge's next message that is not a progress line (those go to `progress`). A failure
    it caused itself raises EvaluatorFailure; one it blames on the candidate is returned."""
    while (msg := judge.says(JUDGE_TIMEOUT_S)).get("kind") == "progress":
        if progress is not None:
            progress(str(msg.get("message")))
    if msg.get("kind") == "failure" and _blamed([msg]) is None:
        raise EvaluatorFailure(f"the judge process failed: {msg.get('message')}")
    return msg
