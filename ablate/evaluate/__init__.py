"""The trusted evaluator: is a submitted kernel correct, and how fast is it against the best library?

    from ablate.evaluate import evaluate
    result = evaluate("rmsnorm", Path("kernel.py"), shapes="eval", seed=None, timing=True)

    python -m ablate.evaluate --operator rmsnorm --submission kernel.py [--shapes eval] [--json] [--seed N]

The submission is hostile until proven otherwise, and nothing its process says is evidence: its
time comes from the judge's clock and its outputs from the judge's own reads of the memory it
wrote them into. Four processes:
  supervisor (_supervisor, _servers, _kit; the caller's process): reads the file safely (a
      regular file, no links, at most 1 MiB), scans it (_static); hands the request to a warm
      judge; starts the candidate once the judge is ready and hands the candidate's socket to
      the judge; enforces the time and memory limits, kills on a hang, and watches the
      candidate's process tree for helper processes. It imports no torch and runs no submitted
      code.
  judge (_judge, _shape, _exchange, _clock, with _correctness, _baselines, _verdicts): measures
      the GPU's ceilings and calibrates the correctness envelopes before any submitted code runs;
      draws every input set from a fresh seed and computes its reference in float64; writes each
      input set into shared slots, asks for calls, reads each output where it was written and
      judges it; times batches of calls by its own clock. It never imports the submission.
  library (_library): the baselines, run by the same driver in an interpreter of their own (kept
      by the judge across evaluations: trusted code only) and timed by the same protocol, so a
      library's time and a kernel's carry the same protocol cost.
  candidate (_candidate, from a read-only kit of the evaluator's own files): confined by the one
      bubblewrap policy (ablate/sandbox/_bwrap.py), a fresh interpreter per evaluation. Its
      driver calls the kernel on the slots the judge names and reports where the outputs are;
      the audit-hook guard (_guard) and the integrity snapshot (_integrity) keep the scan honest.
The processes talk over Unix sockets (_channel); memory is shared by file descriptor: on a GPU,
device memory (_cuda: virtual memory management, a POSIX descriptor per allocation, so it crosses
the sandbox's PID namespace), on a CPU, memfds.

Correctness: per shape, `draws` (3) fresh seeds x operators.DISTRIBUTIONS, full outputs, the
operator's rule, NaN never passes, output memory poisoned before each call, inputs compared after
it, the ATen operators of the contract dispatched on any thread of the candidate a passthrough, a
torch dispatch or function mode left in force a rejection (hook_active).
Timing (GPU, _shape): batches of calls, each call on fresh inputs of its own (no answer can be
kept), queued by the candidate behind a gate word; the judge's stream copies the batch's inputs
in, runs a witness (_clock: a kernel reading the device's global timer, which sees any other
context's time slice), opens the gate and stamps the time, waits on its own stream for the
candidate's marker word, stamps again, runs a witness, copies out the outputs and inputs of calls
drawn then, and runs a last witness. A batch's time is the two stamps apart over its calls; a
batch in which a witness saw the candidate's work outside it does not count, and too many such
batches on an unshared GPU are a rejection (work_outside_window); drawn calls must be right for
their own inputs (stale_output). Times faster than the physical speed of light are rejected;
speedups over 3x are flagged. A library's time is cached once timed, so it is timed until two
runs agree within 3% ("noisy_best_baseline" in a row's flags when no two of four did;
"baseline_not_loaded" when a library is installed but failed to import). Before and after each
library's timing, and after each candidate's, a canary copy probes for another process on the GPU
("contended_baseline", that time used once and not cached; "gpu_contended"). One evaluation at a
time per GPU (a lock on its UUID). CPU: Triton's interpreter, a batch of three calls timed by the
judge's clock around its messages, labelled "cpu-interpreted".

Result keys: verdict, reasons, details {reason: message}, operator, shape_set, submission_sha256,
seed, evaluator_version, sandbox ("bwrap" | "none", with sandbox_note when unconfined), timing
("judge-clock" | "cpu-interpreted" | "none"), device, ceilings, checks {reason:
pass|fail|skip}, static_flags, flags, shapes [{shape, shape_id, correct, max_abs_error, error,
time_ms {median, p10, p90, n, batches, voided, calls_per_batch, protocol_ms, copy_in_us on a GPU}, wall_ms, baselines_ms, baselines_skipped,
baselines_noisy, baselines_contended, best_baseline, speedup_vs_best, sol_fraction, floor_ms, flags, voided_batches,
contention, seconds {references, checking, timing; and within them placing (the input sets into
their slots, the judge's device work done), peer (waiting for the candidate's reports of its calls;
peer_checking: its share within checking; peer_first_set: the first input set's, the kernel's first
call on the shape, where it compiles), ran (for its reports of what the device ran in a timed batch, on a GPU),
checks (the input sets' outputs judged), timed_inputs, timed_checks, device (waiting for a batch on
the GPU)}}], geomean_speedup (accepted submissions only), draws, seconds,
phase_seconds (judge_ready: the judge's setup, split into judge_libraries (which libraries can run
here), judge_ceilings, judge_envelopes and judge_baselines; candidate; judge_result;
candidate_start). The reason codes and what each means: REASONS (_reasons.py).

Environment: ABLATE_CACHE_DIR (default ~/.cache/ablate), ABLATE_EVAL_SANDBOX=none (candidates
unconfined: recorded in the result and warned on stderr), ABLATE_EVAL_SPARE=0 (no candidate
started ahead), ABLATE_EVAL_MEMORY_GB, ABLATE_EVAL_TMP, ABLATE_EVAL_KEEP=1 (keep the evaluation
directory), ABLATE_GPU_LOCK_DIR (where the GPUs' lock files are; default /tmp),
ABLATE_EVAL_BASELINES=a,b (benchmarks: calibrate against and time these libraries only).
"""
from ablate.evaluate._reasons import REASONS, VERSION

__all__ = ["REASONS", "VERSION", "EvaluatorFailure", "evaluate", "shutdown"]


def __getattr__(name: str):
    """The supervisor's names, imported when first asked for: the judge, library and candidate
    processes import this package for their own modules and never run the supervisor."""
    if name in ("EvaluatorFailure", "evaluate", "shutdown"):
        from ablate.evaluate import _supervisor

        return getattr(_supervisor, name)
    raise AttributeError(f"module 'ablate.evaluate' has no attribute {name!r}")
