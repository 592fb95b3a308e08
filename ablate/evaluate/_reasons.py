"""Rejection reasons: one short code per failure class, written here once. ``result["checks"]``
has one entry per code ("pass" | "fail" | "skip"), so reports can count how many submissions
each check rejected."""

# The judge's rules, as one version: records judged under different versions never pair.
# 22: on a CPU each call's inputs come in memory of their own, sent with the call: placed in the
#     shape's slots, which the kernel keeps mapped, a thread of its could read a timed call's inputs
#     and compute it before the clock started
# 21: a CPU timing's window closes once the judge has copied the outputs out, not when the candidate
#     reports: a thread of the kernel's could write them in shared memory in between, untimed
# 20: a CPU timing copies every timed call's outputs and inputs out before judging any (each was read
#     in its turn, so a thread of the kernel's writing the later calls' outputs meanwhile went unseen)
# 19: a GPU watch's session opens with padding kernels and a sentinel, so CUPTI's loss of a session's
#     first kernel records (one more each session) cannot hide a library kernel; a loss past the
#     padding flags the row device_watch_incomplete
# 18: a device kernel is the library's in any instantiation, and any kernel of the family's vendor
#     libraries is (cuBLAS's for a product, whatever the shape or precision it was picked for); the
#     kernel libraries are not in a candidate's sandbox; a library's compile-and-autotune call is an
#     untimed warm-up, so its first timed batch (the copy-in yardstick) is watched like the rest
# 17: on a GPU the watch records the device's kernels until the batch has run (a gated batch is
#     reported again once run), in the library process too; a kernel a library operator of the task
#     launched for its library is a passthrough however it is reached (a CUDA graph replayed)
# 16: an operator's library operators are whole families of library kernels (a convolution for a
#     matrix product, a batch norm for an RMS norm, a masked softmax for a softmax), in-place
#     variants included (operators/_library_ops.py); an operator's kernel run for a dispatch key
#     (OpOverload._op_dk, unrecorded) is refused for them and a passthrough
# 15: torch's profiler switches are the operator watch's alone in a candidate, and a batch whose
#     watch lost its markers is driver_tampered (a kernel stopped the profiler around a library call);
#     a library operator redispatched or run by its kernel function (the profiler records neither)
#     is refused and a passthrough; a normalisation's library operators are every normalisation's
# 14: a build tool a library names that is nowhere on PATH fails as not found, not as forbidden
#     (torch.compile asks for `nvcc --version` on a GPU: its honest kernels were rejected); a timed
#     batch's checked calls distinct (two random draws could be one call, or the last)
# 13: the protocol's own cost a batch measured at last on a GPU (version 10's never was: it always
#     came out unmeasured, so 0 was taken off)
# 12: a CPU timing starts after one untimed call on the shape (a library was timed cold)
# 11: a timed batch's length drawn per batch and its last call always checked; each input of a
#     call a storage of its own bytes
# 10: timed calls on N(0,1) inputs only, the protocol's own cost a batch taken off every batch;
# 9: the judge's own clock on the device, outputs read where the kernel wrote them, libraries timed alike
VERSION = "22"

REASONS: dict[str, str] = {
    # the file itself (decided before any process starts)
    "missing_file": "the submission is missing or not a regular file (a directory, a link, a FIFO)",
    "file_too_large": "kernel.py is larger than the evaluator reads (1 MiB)",
    "syntax_error": "kernel.py does not parse",
    "no_kernel_function": "kernel.py defines no callable named kernel",
    "library_passthrough": "the kernel calls the library it should beat, or the reference (in its source, or "
                           "an ATen operator of the contract dispatched at run time)",
    "forbidden_code": "the kernel uses what a kernel has no business using: frame or garbage-collector "
                      "introspection, code replacement, ctypes, processes, /proc, private torch APIs, dynamic "
                      "code (in its source, or refused at run time)",
    # importing and calling it (candidate process)
    "import_error": "importing kernel.py raised (a module or artefact outside the submission, for one)",
    "bad_signature": "kernel cannot be called with the operator's inputs",
    "exception": "kernel raised an exception",
    "crash": "the candidate process died (segfault, illegal memory access, os._exit, CUDA error)",
    "timeout": "the candidate ran past its time limit",
    "oom": "the candidate ran out of memory or past its memory limit",
    # its outputs
    "output_not_dense": "an output is not a plain dense torch.Tensor (subclass, lazy object, sparse, overlapping)",
    "wrong_shape": "an output has the wrong shape (or the wrong number of outputs)",
    "wrong_dtype": "an output has the wrong dtype",
    "wrong_device": "an output is on the wrong device",
    "incorrect": "an output differs from the reference beyond the dtype's tolerance, or holds NaN",
    "input_mutated": "the kernel changed its inputs",
    "output_aliases_input": "an output shares memory with an input",
    "helper_process": "the kernel started a process other than a compiler or build tool",
    # its timing
    "stale_output": "the output of a timed call, read by the judge right after its batch, is wrong for that call's "
                    "own input (caching, skipping work, work left for later)",
    "work_outside_window": "the judge's witness saw the candidate's device work before its batch started or after it "
                           "ended, in more than a quarter of its batches, on a GPU no other process was using",
    "hook_active": "a torch dispatch or function mode was still in force when the kernel returned (what could "
                   "change the driver's own tensor operations)",
    "timer_tampered": "a timing function was replaced after the submission was imported",
    "driver_tampered": "a library function was replaced, the driver's operator watch was stopped or blinded, or a "
                       "report broke the protocol",
    "below_roofline": "faster than speed of light: the physical floor of bytes and flops (datasheet or measured ceiling)",
    "protocol_violation": "what the candidate sent broke the judge (a malformed or impossible report): its "
                          "rejection, never an evaluator failure",
}

# Timing-related names watched for identity (a replacement is timer_tampered, not driver_tampered).
TIMER_NAMES = (
    "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "statistics.median",
    "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize", "torch._C._CudaEventBase.record",
    "torch._C._CudaEventBase.elapsed_time", "torch.cuda.synchronize", "torch.cuda.current_stream",
    "torch.cuda.CUDAGraph.replay",
)
