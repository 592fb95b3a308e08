"""The candidate process: imports the submission and calls it on the inputs the judge sends, then
times it; reports outputs, local checks and timings to the judge on its socket. What the
submission prints is never read.

It runs confined (see ablate/sandbox/_bwrap.py: no capabilities, an unprivileged uid or its own
user namespace, a fresh root with the Python environment and the GPU, its evaluation directory,
nothing of the project) and starts from BOOT, which loads the evaluator's own modules from the kit
directory privately: with a private copy of the builtins, and gone from sys.modules before the
submission is imported, so the submission can neither import nor patch them. Before the import
the driver binds everything it relies on (C-level torch, os and socket callables, the timing
stream, the L2 flush buffer, the device trace) and installs the audit-hook guard (_guard). The submission never
sees a seed, a shape list or the reference: only the inputs of the call it is in.

Protocol (judge -> candidate): go {entry, device, timing, cuda_graph, library_ops}; per input set
inputs {shape, set, entries, source} + memfd; time {shape, sources, est_ms}; done.
(candidate -> judge): hello; import {reason, message, failures}; output {shape, set, reason,
message, failures, entries} + memfd; kept {shape, call, set, moves, entries} + memfd (during
timing); timing {shape, result, failures, seconds}.
"""
from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import threading
import time
import traceback

from ablate.evaluate import _channel, _guard, _integrity, _tensors, _timing, _trace

_perf = time.perf_counter
_listdir = os.listdir


def _encoder():
    """JSON from C parts only (a submission cannot rebind them)."""
    from _json import encode_basestring_ascii, make_encoder

    def default(o):
        raise TypeError(f"not JSON: {type(o).__name__}")

    enc = make_encoder(None, default, encode_basestring_ascii, None, ":", ",", False, False, True)
    join = "".join
    return lambda obj: join(enc(obj, 0))


def classify(exc: BaseException) -> str:
    """Reason code of an exception raised by the kernel."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemoryError) or "out of memory" in text.lower() or "can't allocate memory" in text:
        return "oom"
    if any(s in text for s in ("CUDA error", "illegal memory access", "device-side assert", "misaligned address")):
        return "crash"  # the CUDA context is gone; nothing after this is trustworthy
    return "exception"


def _tb(exc: BaseException, limit: int = 4000) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text if len(text) <= limit else "..." + text[-limit:]


def _native_threads() -> int:
    try:
        return len(_listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class OpWatch:
    """The ATen operators dispatched during a call (the run-time library-passthrough check): the
    autograd profiler records every dispatcher call, composite operators included, however the
    call was spelled in the source (F.rms_norm, torch.nn.RMSNorm, torch.ops.aten..., getattr)."""

    def __init__(self, names):
        import warnings

        import torch

        self.watched = frozenset(names)
        self.profile = torch.autograd.profiler.profile
        self.seen: list[str] = []
        warnings.filterwarnings("ignore", module="torch.autograd.profiler")

    def __call__(self, fn, inputs):
        if not self.watched:
            return fn(*inputs)
        with self.profile(use_kineto=False) as prof:
            out = fn(*inputs)
        for name in {e.name for e in prof.function_events} & self.watched:
            if name not in self.seen:
                self.seen.append(name)
        return out


class Driver:
    def __init__(self, go: dict, torch, device: str, snapshot, ch, guard_log, stream, flush, l2, trace=None):
        self.go, self.torch, self.device, self.snapshot, self.ch = go, torch, device, snapshot, ch
        self.guard_log, self.stream, self.flush, self.l2, self.trace = guard_log, stream, flush, l2, trace
        self.sync = torch._C._cuda_synchronize if device == "cuda" else (lambda: None)
        self.empty, self.fill, self.equal, self.clone = torch.empty, torch._C.TensorBase.fill_, torch.equal, \
            torch._C.TensorBase.clone
        self.ops = OpWatch(go.get("library_ops") or ())
        self.native_base: int | None = None
        self.fn = None
        self.sources: dict[int, tuple] = {}  # shape's timing-source sets, kept on the device
        self.call_ms: list[float] = []
        self.guard_seen = 0
        self.signature_checked: int | None = None  # the shape whose inputs the signature was bound to
        self.entries = None  # operators._entries, bound before the kit is forgotten

    # -- helpers -----------------------------------------------------------------------------
    def failures_now(self) -> dict[str, str]:
        """What the guard refused and what was replaced since the last report."""
        found = {k: "replaced: " + ", ".join(v) for k, v in self.snapshot.tampered().items() if v}
        new = self.guard_log[self.guard_seen:]
        self.guard_seen = len(self.guard_log)
        if new:
            found["forbidden_code"] = "at run time: " + "; ".join(f"{e} ({w})" for e, w in new[:5])
        return found

    def poison(self, nbytes: int) -> None:
        """Fill memory the allocator will hand out next with NaN bit patterns (0xFF bytes)."""
        if nbytes > 0:
            p = self.empty(nbytes, dtype=self.torch.uint8, device=self.device)
            self.fill(p, 0xFF)
            del p

    def call(self, inputs, first: bool) -> tuple[object, str | None, str | None]:
        """(output, reason, message): one call, synchronised, watched (threads, dispatched ops)."""
        py_before = set(threading.enumerate())
        t0 = _perf()
        try:
            out = self.ops(self.fn, inputs)
            self.sync()
            self.call_ms.append((_perf() - t0) * 1e3)
        except BaseException as e:  # SystemExit and friends included: the kernel must return
            return None, classify(e), _tb(e)
        new = [t.name for t in threading.enumerate() if t not in py_before and t.is_alive()]
        native = _native_threads()
        if first or self.native_base is None:
            # the first call of a shape may compile a new specialisation and start library pools
            self.native_base = max(native, self.native_base or 0)
        if new:
            return out, "thread_injection", f"thread(s) still running after the call returned: {new}"
        if native > self.native_base:
            return out, "thread_injection", f"{native - self.native_base} native thread(s) started by the call still running"
        return out, None, None

    # -- one input set -----------------------------------------------------------------------
    def run_set(self, msg: dict, fd: int) -> None:
        torch = self.torch
        index, k = int(msg["shape"]), int(msg["set"])
        t0 = _perf()
        try:
            ins = tuple(_channel.read_tensors(fd, msg["entries"], self.device, 1 << 40))
        finally:
            _channel.close_all([fd])
        reply = {"shape": index, "set": k, "reason": None, "message": None, "failures": {}}
        fails = reply["failures"]
        if self.signature_checked != index:
            self.signature_checked = index
            try:
                inspect.signature(self.fn).bind(*ins)
            except TypeError as e:
                reply.update(reason="bad_signature",
                             message=f"kernel{inspect.signature(self.fn)} cannot take the {len(ins)} inputs: {e}")
                return self.ch.send("output", **reply)
            except ValueError:
                pass  # no signature to inspect (a builtin): let the call decide
        clones = tuple(self.clone(t) if isinstance(t, torch.Tensor) else t for t in ins)
        if msg.get("source"):
            self.sources[k] = clones  # untouched copies: what the timed loop refills its inputs from
        self.poison(sum(t.numel() * t.element_size() for t in ins if isinstance(t, torch.Tensor)))
        out, reason, message = self.call(ins, first=k == 0)
        fails.update(self.failures_now())
        if self.ops.seen:
            fails["library_passthrough"] = "at run time the kernel dispatched " + ", ".join(self.ops.seen[:6])
        if reason and reason != "thread_injection":
            reply.update(reason=reason, message=message, fatal=reason in ("crash", "oom"))
            return self.ch.send("output", **reply)
        if reason:
            fails.setdefault(reason, message)
        outs = _tensors.as_list(out)
        if outs is None:
            reply.update(reason="output_not_dense",
                         message=f"kernel returned {type(out).__name__}; expected a torch.Tensor (or a tuple of them)")
            return self.ch.send("output", **reply)
        for t in (t for t in outs if isinstance(t, torch.Tensor)):
            if (why := _tensors.layout_problem(t)) is not None:
                fails.setdefault("output_not_dense", f"output is not a plain dense tensor: {why}")
            if t.device.type != self.device:
                fails.setdefault("wrong_device", f"output on {t.device}, inputs on {self.device}")
        if _tensors.aliases(outs, ins):
            fails.setdefault("output_aliases_input", "an output shares storage with an input")
        for a, b in zip(ins, clones):
            if isinstance(a, torch.Tensor) and not self.equal(a, b):
                fails.setdefault("input_mutated", "an input changed during the call")
        if "output_not_dense" in fails or "wrong_device" in fails:
            return self.ch.send("output", **reply)
        fd_out, entries = _tensors.to_sealed(f"out-{index}-{k}", outs)
        reply["entries"] = entries
        reply["seconds"] = round(_perf() - t0, 4)
        reply["call_ms"] = round(self.call_ms[-1], 4) if self.call_ms else None  # the first one compiles
        try:
            self.ch.send("output", fds=[fd_out], **reply)
        finally:
            _channel.close_all([fd_out])

    # -- timing ------------------------------------------------------------------------------
    def time_shape(self, msg: dict) -> None:
        torch = self.torch
        index = int(msg["shape"])
        order = [int(k) for k in msg["sources"]]
        reply = {"shape": index, "result": None, "failures": {}, "reason": None, "message": None}
        if not all(k in self.sources for k in order):
            reply.update(reason="driver_tampered", message="timing sources missing")
            return self.ch.send("timing", **reply)
        sources = [self.sources.pop(k) for k in order]
        self.sources.clear()
        live = tuple(self.clone(t) if isinstance(t, torch.Tensor) else t for t in sources[0])
        ch = self.ch

        def keep(call, j, moves, outs):
            if _tensors.as_list(outs) is None:
                return ch.send("kept", shape=index, call=call, set=order[j], moves=moves, entries=None)
            fd, entries = _tensors.to_sealed(f"kept-{index}-{call}", outs)
            try:
                ch.send("kept", fds=[fd], shape=index, call=call, set=order[j], moves=moves, entries=entries)
            finally:
                _channel.close_all([fd])

        t0 = _perf()
        try:
            est = sorted(self.call_ms)[len(self.call_ms) // 2] if self.call_ms else None
            result = _timing.measure(self.fn, live, sources, device=self.device, graph=bool(self.go.get("cuda_graph")),
                                     l2=self.l2, est_ms=est, keep=keep, stream=self.stream, flush=self.flush,
                                     trace=self.trace)
        except BaseException as e:
            reason = classify(e)
            if self.go.get("cuda_graph") and "graph" in _tb(e).lower() and reason == "exception":
                reason = "graph_capture_failed"
            reply.update(reason=reason, message=f"during timing: {_tb(e)}", fatal=reason in ("crash", "oom"))
            reply["failures"].update(self.failures_now())
            return ch.send("timing", **reply)
        if result.pop("l2_persistence", False):
            reply["failures"]["l2_persistence"] = ("persisting L2 was reserved or an access-policy window set "
                                                   "during a timed call")
        reply["failures"].update(self.failures_now())
        reply["result"] = result
        reply["l2_checked"] = bool(self.l2 is not None and self.l2.available)
        reply["seconds"] = round(_perf() - t0, 4)
        del live, sources
        if self.device == "cuda":  # the judge now builds the kept calls' references beside this process
            torch.cuda.empty_cache()
        self.call_ms = []
        ch.send("timing", **reply)

    # -- the whole run -----------------------------------------------------------------------
    def run(self, path: str) -> None:
        spec = importlib.util.spec_from_file_location("kernel", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["kernel"] = module
        try:
            spec.loader.exec_module(module)
        except SyntaxError as e:
            return self.ch.send("import", reason="syntax_error", message=_tb(e), failures=self.failures_now())
        except BaseException as e:
            reason = classify(e)
            return self.ch.send("import", reason="import_error" if reason == "exception" else reason,
                                message=_tb(e), failures=self.failures_now())
        try:
            self.fn = self.entries.kernel_of(module, self.go.get("entry"))
        except ValueError as e:
            return self.ch.send("import", reason="no_kernel_function", message=str(e), failures=self.failures_now())
        except BaseException as e:
            return self.ch.send("import", reason="import_error", message=_tb(e), failures=self.failures_now())
        if not callable(self.fn):
            return self.ch.send("import", reason="no_kernel_function", message="kernel.py defines no callable kernel",
                                failures=self.failures_now())
        failures = self.failures_now()  # tampering at import is reported and the kernel still judged
        if self.l2 is not None and self.l2.available and self.l2.used():
            failures["l2_persistence"] = "persisting L2 reserved at import"
            self.l2.reset()
        self.ch.send("import", reason=None, failures=failures)
        while True:
            got = self.ch.recv(None)
            msg, fds = got
            kind = msg.get("kind")
            if kind == "inputs" and len(fds) == 1:
                self.run_set(msg, fds[0])
            elif kind == "time":
                self.time_shape(msg)
            elif kind == "done":
                return
            else:
                _channel.close_all(fds)
                return


def prepare(device_request: str):
    """Imports and captures, before any submitted code: returns (torch, device, snapshot, trace)."""
    import torch

    from ablate.evaluate import _gpu

    device = _gpu.resolve_device(device_request)
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    else:
        torch.zeros(1, device="cuda")  # the CUDA context, while waiting for "go"
    try:
        import triton  # noqa: F401  (imported now: the submission's own import is then cheap)
        if device == "cuda":  # Triton builds its launcher utilities (a C compile) on first use: now,
            triton.runtime.driver.active.get_current_target()  # in this evaluation's fresh cache
    except Exception:  # no triton, or one that cannot start: the submission finds out itself
        pass
    trace = None
    if device == "cuda":
        trace = _trace.DeviceTrace()
        if trace.available:  # CUPTI's first start loads and sets up its library: now, not in a timed loop
            try:
                trace.start()
                torch.zeros(1, device="cuda").add_(1)
                trace.stop()
            except Exception as e:  # noqa: BLE001
                trace.available, trace.why = False, f"the profiler would not start: {type(e).__name__}: {e}"
    return torch, device, _integrity.Snapshot(), trace


def _forget_kit(finder) -> None:
    """The kit's modules leave sys.modules and its finder the import system: the submission
    cannot import them (its `import ablate...` finds nothing) and holds no path to the copies
    this process runs."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
    for name in list(sys.modules):
        if name.split(".")[0] in ("ablate", "operators"):
            del sys.modules[name]


def run(go: dict, ch, torch, device: str, snapshot, finder, trace=None) -> int:
    ch.send_key = bytes.fromhex(go["key"])  # from now on only the driver can speak
    if go.get("device") != device:
        ch.send("import", reason="crash", message=f"candidate sees device {device}, judge {go.get('device')}",
                failures={})
        return 1
    stream = torch.cuda.current_stream() if device == "cuda" else None
    flush = l2 = None
    if device == "cuda":  # everything the timed loop uses, made before the candidate's code runs
        from ablate.evaluate._gpu import L2Guard, flush_buffer

        flush, l2 = flush_buffer(), L2Guard(stream)
    from operators import _entries

    guard_log = _guard.install(os.path.dirname(go["submission"]), go["kit"])
    driver = Driver(go, torch, device, snapshot, ch, guard_log, stream, flush, l2, trace)
    driver.entries = _entries
    _forget_kit(finder)
    driver.run(go["submission"])
    return 0


def _serve(fd: int, prepared, finder) -> int:
    from ablate.evaluate import _gpu

    torch, device, snapshot, trace = prepared
    _gpu.cpu_threads_warm()  # here, not in the zygote: a forked child has none of its parent's threads
    ch = _channel.Channel.from_fd(fd, encode=_encoder())
    ch.send("hello", pid=os.getpid())
    got = ch.recv(None)
    msg = got[0] if got else {}
    if msg.get("kind") != "go":
        return 0  # the judge gave up before starting (a bad request)
    code = run(msg, ch, torch, device, snapshot, finder, trace)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def boot(finder, kit: str, fd: str, mode: str = "once") -> int:
    """From BOOT. mode "once": one evaluation in this fresh interpreter (the GPU path: set up,
    wait for the judge's "go"). mode "zygote": the warm CPU zygote (_zygote) forking one child
    per evaluation."""
    prepared = prepare(os.environ.get("ABLATE_EVAL_DEVICE", "auto"))
    if mode == "zygote":
        from ablate.evaluate import _zygote

        return _zygote.serve(int(fd), prepared, finder, _serve)
    try:
        code = _serve(int(fd), prepared, finder)
    except _channel.Closed:
        code = 0
    # Everything is reported: skip the interpreter's and CUDA's orderly teardown (about a second
    # with GBs of inputs on the device); the evaluation ends when this process does.
    os._exit(code)
