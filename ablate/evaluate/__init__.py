"""The trusted evaluator: is a submitted kernel correct, and how fast is it against the best library?

    from ablate.evaluate import evaluate
    result = evaluate("rmsnorm", Path("kernel.py"), shapes="eval", seed=None, timing=True)

    python -m ablate.evaluate --operator rmsnorm --submission kernel.py [--shapes eval] [--json] [--seed N]

The submission is hostile until proven otherwise. Three processes, so that nothing it does can
reach the references, the comparison or the verdict:
  supervisor (_supervisor, _servers; the caller's process): reads the file safely (a regular file,
      no links, at most 1 MiB), scans it (_static); hands the request to a warm judge; starts the
      candidate once the judge is ready and hands the candidate's socket to the judge; enforces
      the time and memory limits, kills on a hang, and watches the candidate's process tree for
      helper processes. It imports no torch and runs no submitted code.
  judge (_judge, with _correctness, _baselines, _verdicts; kept warm between evaluations):
      measures the GPU's speed-of-light ceilings and the baselines' times (cached) before any
      submitted code runs; draws every input set from a fresh seed and computes its reference in
      float64; sends the candidate its inputs one set at a time and judges what comes back. It
      never imports the submission.
  candidate (_candidate, from a read-only kit of the evaluator's own files): confined by the one
      bubblewrap policy (ablate/sandbox/_bwrap.py: no capabilities, an unprivileged uid or its own
      user namespace, no network, a fresh root with the Python environment, the GPU and its own
      evaluation directory, nothing of the project, the cache or the store). Its driver binds
      what it relies on and installs an audit-hook guard (_guard) before the submission is
      imported. On a GPU a fresh interpreter per evaluation (started ahead, while the previous one
      runs); on a CPU a child forked from a warm confined zygote (_zygote).
The processes talk over Unix sockets (_channel); tensors cross as sealed memfds, so what the
candidate reported cannot change after it reported it, and the judge opens no path the candidate
could write.

Correctness: per shape, `draws` (3) fresh seeds x operators.DISTRIBUTIONS, full outputs, the
operator's rule, NaN never passes, output memory poisoned before each call, inputs compared with
clones after it, ATen operators of the contract dispatched during the call are a passthrough.
Timing (GPU): CUDA events around the call alone; before each call the inputs are refilled from
rotating sets, one element of each is moved, and L2 is flushed (persisting L2 checked and reset);
median of ~100 ms of calls; calls drawn at random after they return are sealed and re-checked
against the reference of their exact input; the device must go idle when the timed stream does;
times faster than the physical speed of light are rejected; speedups over 3x are flagged. A
library's time is cached once timed, so it is timed until two runs agree within 3%
("noisy_best_baseline" in a row's flags when no two of four did; "baseline_not_loaded" when a
library is installed but failed to import, so the speedup is against the others only). Before
and after each library's timing, and after each candidate's, a canary copy probes for another
process on the GPU ("contended_baseline", that time used once and not cached; "gpu_contended",
with the row's "contention" saying why); ceilings cached while another process used the GPU (a
canary faster now than then) are measured again, and the library times cached beside them with
them. One evaluation at a time per GPU (a lock on its UUID, held by the judge, or by the trial
that started it for the whole trial; "no_device_lock" in flags when it cannot be taken). CPU:
Triton's interpreter, a handful of calls, labelled "cpu-interpreted".

Result keys: verdict, reasons, details {reason: message}, operator, shape_set, submission_sha256,
seed, evaluator_version, sandbox ("bwrap" | "none", with sandbox_note when unconfined), timing
("cuda-events" | "cuda-graph" | "cpu-interpreted" | "none"), device, ceilings, checks {reason:
pass|fail|skip}, static_flags, flags, shapes [{shape, shape_id, correct, max_abs_error, error,
time_ms, wall_ms, baselines_ms, baselines_skipped, baselines_noisy, baselines_contended, best_baseline,
speedup_vs_best, sol_fraction, floor_ms, flags, contention, seconds}], geomean_speedup (accepted submissions only), draws, seconds,
phase_seconds (judge_ready: the judge's setup, split into judge_ceilings, judge_envelopes and judge_baselines;
candidate; judge_result; candidate_start). The reason codes and what each means: REASONS (_reasons.py).

Environment: ABLATE_CACHE_DIR (default ~/.cache/ablate), ABLATE_EVAL_SANDBOX=none (candidates
unconfined: recorded in the result and warned on stderr), ABLATE_EVAL_ZYGOTE=0 (CPU candidates in
fresh interpreters too), ABLATE_EVAL_SPARE=0 (no candidate started ahead), ABLATE_EVAL_MEMORY_GB,
ABLATE_EVAL_TMP, ABLATE_EVAL_KEEP=1 (keep the evaluation directory), ABLATE_GPU_LOCK_DIR (where
the GPUs' lock files are; default /tmp).
"""
from ablate.evaluate._reasons import REASONS, VERSION
from ablate.evaluate._supervisor import EvaluatorFailure, evaluate, shutdown

__all__ = ["REASONS", "VERSION", "EvaluatorFailure", "evaluate", "shutdown"]
