"""The trusted evaluator: is a submitted kernel correct, and how fast is it against the best library?

    from ablate.evaluate import evaluate
    result = evaluate("rmsnorm", Path("kernel.py"), shapes="eval", seed=None, timing=True)

    python -m ablate.evaluate --operator rmsnorm --submission kernel.py [--shapes eval] [--json] [--seed N]

Processes, so that nothing the submission does can reach the verdict:
  supervisor (_api, _procs; the caller's process): static checks of the file; hands the request to
      a judge; starts the candidate once the judge is ready; enforces the time and memory limits and
      kills on a hang; imports no torch and runs no submitted code.
  judge (_checker, kept warm between evaluations): validates the request; measures the GPU's
      ceilings and the baselines' times (cached) before any submitted code runs; computes references
      in float64 on upcast inputs from the same seeds; loads the candidate's outputs and decides
      every check. It never imports the submission.
  candidate (_driver): in bubblewrap when available (the file system read-only but for its own
      evaluation directory, where TMPDIR points; a private /dev/shm; its own PID namespace). On a
      GPU a fresh interpreter per evaluation (started ahead, while the previous evaluation runs, so
      torch and CUDA are up when it is needed); on a CPU a child forked from a warm sandboxed zygote
      (_zygote) that imported torch and triton but never ran submitted code nor touched CUDA. It
      imports kernel.py copied into a fresh directory with fresh HOME and Triton/torch/CuPy caches,
      runs it on every input set, times it, and reports through a result file whose lines carry a
      per-run nonce; its stdout is never read. Timers and driver functions are captured before the
      import and checked for identity after it; whatever it leaves running is killed.

Correctness: per shape, `draws` (3) fresh seeds x operators.DISTRIBUTIONS, full outputs, the
operator's per-dtype tolerance, NaN never passes, output memory poisoned before each call, inputs
compared with clones after it. Timing (GPU): CUDA events, L2 flushed before each call (persisting
L2 checked and reset), inputs refilled from rotating sets, adaptive number of calls (~100 ms),
median; one call per input set chosen at random is re-checked; the device must go idle when the
timed stream does (work left on a side stream is caught); times under half the roofline floor are
rejected. CPU: Triton's interpreter, a handful of calls, labelled "cpu-interpreted".

Result keys: verdict, reasons, details {reason: message}, operator, shape_set, submission_sha256,
seed, sandbox ("bwrap" | "process"), timing ("cuda-events" | "cuda-graph" | "cpu-interpreted" |
"none"), device, ceilings, checks {reason: pass|fail|skip}, shapes [{shape, shape_id, correct, max_abs_error, error, time_ms,
wall_ms, baselines_ms, baselines_skipped, best_baseline, speedup_vs_best, sol_fraction, seconds}],
geomean_speedup (accepted submissions only), draws, seconds, phase_seconds. A shape's `seconds`
says where the evaluation's time went: the judge's references, its comparing (of each input
set's outputs as the candidate sends them, then of the rest after its report) and waiting, and
the candidate's own (unverified, diagnostic) account: check, outputs, timing, first_call_ms (a
fresh process compiles the kernel there). phase_seconds: judge_ready, candidate_start (from the
judge being ready to the candidate's import report), candidate, judge_result.

Environment: ABLATE_CACHE_DIR (default ~/.cache/ablate), ABLATE_EVAL_SANDBOX=none (no bubblewrap),
ABLATE_EVAL_ZYGOTE=0 (CPU candidates in fresh interpreters too), ABLATE_EVAL_SPARE=0 (no fresh
candidate started ahead), ABLATE_EVAL_MEMORY_GB, ABLATE_EVAL_TMP, ABLATE_EVAL_KEEP=1 (keep the
evaluation directory). Without bubblewrap a hostile candidate can still signal or read other
processes of the same user; crashes, hangs and memory blow-ups are contained either way.

Reason codes (one per failure class; `checks` has one entry per code):
  missing_file          the submission path is not a file
  syntax_error          kernel.py does not parse
  no_kernel_function    kernel.py defines no callable named kernel
  library_passthrough   the source calls the library it should beat, or the reference (static scan)
  import_error          importing kernel.py raised (a module or artefact outside the submission)
  bad_signature         kernel cannot be called with the operator's inputs
  exception             kernel raised an exception
  crash                 the candidate process died (segfault, illegal memory access, os._exit)
  timeout               the candidate ran past its time limit
  oom                   the candidate ran out of memory or past its memory limit
  output_not_dense      an output is not a plain dense torch.Tensor (subclass, lazy, sparse, overlapping)
  wrong_shape           an output has the wrong shape (or the wrong number of outputs)
  wrong_dtype           an output has the wrong dtype
  wrong_device          an output is on the wrong device
  incorrect             an output differs from the reference beyond tolerance, or holds NaN
  input_mutated         the kernel changed its inputs
  output_aliases_input  an output shares memory with an input
  thread_injection      a thread started by the kernel was still alive after the call returned
  stale_output          the output of a call inside the timed loop is wrong (caching, loop skipping)
  timer_tampered        a timing function was replaced after the submission was imported
  driver_tampered       a driver function was replaced, or its report is not genuine
  stream_mismatch       wall-clock time with a full device sync far exceeds the event time
  below_roofline        faster than the measured memory or compute ceiling allows
  l2_persistence        the kernel reserved persisting L2 or set an access-policy window
  graph_capture_failed  --cuda-graph: the kernel could not be captured in a CUDA graph
"""
from ablate.evaluate._api import EvaluatorFailure, evaluate, shutdown
from ablate.evaluate._reasons import REASONS

__all__ = ["REASONS", "EvaluatorFailure", "evaluate", "shutdown"]
