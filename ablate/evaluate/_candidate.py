"""The candidate process: imports the submission and calls it on the inputs the judge placed in
shared memory, in batches the judge times by its own clock; reports where each output is and what
its own watch saw. What the submission prints is never read, and nothing it reports is evidence:
the judge reads the outputs itself (see _shape).

It runs confined (see ablate/sandbox/_bwrap.py: no capabilities, an unprivileged uid or its own
user namespace, a fresh root with the Python environment and the GPU, its evaluation directory,
nothing of the project) and starts from BOOT, which loads the evaluator's own modules from the kit
directory privately: with a private copy of the builtins, and gone from sys.modules before the
submission is imported, so the submission can neither import nor patch them. Before the import
the driver binds everything it relies on (C-level torch, os and socket callables, the output pool)
and installs the audit-hook guard (_guard). The submission never sees a seed, a shape list or the
reference: only the inputs of the call it is in.

Protocol (judge -> candidate): go {entry, device, timing, library_ops, library_kernels}; per shape slots {shape,
size, nbytes, out_bytes} + the slots' descriptor (and, on a CPU, the outputs' memfd); call {shape,
batch, gated, check, first, warm_up, calls: [{inputs, outputs}]}; release; done.
(candidate -> judge): hello; import {reason, message, failures}; segments {segments} + descriptors;
called {shape, batch, calls: [{reason, message, failures, entries, threads}], failures, segments,
copied, watched_threads, kernels} + descriptors of new output segments; after a gated batch has
run, ran {batch, failures, kernels} (what the watch saw: its profile lasts until the device is done).
"""
from __future__ import annotations

import ctypes
import importlib.util
import inspect
import mmap
import os
import sys
import threading
import time
import traceback

from ablate.evaluate import _channel, _cuda, _exchange, _guard, _integrity, _tensors
from ablate.evaluate._watch import OpWatch, clear_hooks, seal_switches

_perf = time.perf_counter
_listdir = os.listdir


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


class Driver:
    """Runs the calls the judge asks for, on inputs the judge placed in shared slots, and reports
    where each call's outputs are (_exchange). It times nothing: on a GPU a batch's calls are
    queued behind a gate word the judge's clock opens, and end by setting a marker word the judge
    reads (_clock); on a CPU the judge times the batch's message round trip."""

    def __init__(self, go: dict, torch, device: str, snapshot, ch, guard_log, pool=None, sealed=None):
        self.go, self.torch, self.device, self.snapshot, self.ch = go, torch, device, snapshot, ch
        self.guard_log, self.pool = guard_log, pool
        self.sync = torch._C._cuda_synchronize if device == "cuda" else (lambda: None)
        self.empty, self.fill, self.empty_strided = torch.empty, torch._C.TensorBase.fill_, torch.empty_strided
        self.copy = torch._C.TensorBase.copy_
        self.as_tensor, self.frombuffer = torch.as_tensor, torch.frombuffer  # bound before the kernel is imported
        self.ops = OpWatch(go.get("library_ops") or (), sealed, device, go.get("library_kernels"))
        self.native_base: int | None = None
        self.fn = None
        self.guard_seen = 0
        self.signature_checked: int | None = None  # the shape whose inputs the signature was bound to
        self.entries = None  # operators._entries, bound before the kit is forgotten
        self.slots = None  # (shape, raw uint8 tensor over the judge's slots, size, marker, cpu outputs)
        self.held: list = []  # the last batch's outputs, alive until the judge has read them
        self.stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else None
        self.outputs_copied = False
        self.spans: list[tuple[int, int]] = []
        # every output's storage (span, weak reference): one still alive once the driver has let go
        # of its batch is a buffer the kernel keeps, and a later call may overwrite it before the
        # judge reads it, so from then on it is copied out as part of the call
        self.returned: list = []
        self.kept: list[tuple[int, int]] = []
        if device == "cuda":
            from torch.multiprocessing.reductions import StorageWeakRef

            self.weak = StorageWeakRef

    # -- helpers -----------------------------------------------------------------------------
    def remember(self, t) -> None:
        """An output's whole storage, weakly: to tell next batch whether the kernel kept it."""
        st = t.untyped_storage()
        self.returned.append(((st.data_ptr(), st.data_ptr() + st.nbytes()), self.weak(st)))

    def forget_batch(self) -> None:
        """Let go of the last batch's outputs (the judge has read them); the storages still alive
        then are held by the kernel: `kept`, copied out whenever a later call returns them."""
        self.held = []
        self.returned = [(span, ref) for span, ref in self.returned if not ref.expired()]
        self.kept = [span for span, _ in self.returned]

    def failures_now(self) -> dict[str, str]:
        """What the guard refused and what was replaced since the last report."""
        found = {k: "replaced: " + ", ".join(v) for k, v in self.snapshot.tampered().items() if v}
        new = self.guard_log[self.guard_seen:]
        self.guard_seen = len(self.guard_log)
        return found | _guard.findings(new)

    def poison(self, nbytes: int) -> None:
        """Fill memory the allocator will hand out next with NaN bit patterns (0xFF bytes)."""
        if nbytes > 0:
            p = self.empty(nbytes, dtype=self.torch.uint8, device=self.device)
            self.fill(p, 0xFF)
            del p

    def call(self, inputs, first: bool) -> tuple[object, str | None, str | None]:
        """(output, reason, message): one call, watched (threads, dispatched ops); not synchronised."""
        py_before = set(threading.enumerate())
        try:
            out = self.fn(*inputs)
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

    # -- the judge's slots ---------------------------------------------------------------------
    def on_slots(self, msg: dict, fds: list[int]) -> None:
        """Map the shape's input slots (and, on a CPU, the memfd the outputs go to)."""
        torch = self.torch
        self.drop_slots()
        if self.device == "cuda":
            if self.pool is not None:
                self.pool.send_again()
            mem = _cuda.Shared.open(fds[0], int(msg["size"]))
            raw = torch.as_tensor(_cuda.DeviceArray(mem.ptr, int(msg["nbytes"])), device="cuda")
            self.slots = {"shape": int(msg["shape"]), "raw": raw, "mem": mem, "size": int(msg["nbytes"]),
                          "gate": raw.data_ptr(), "marker": raw.data_ptr() + _exchange.MARKER}
        else:
            slots = mmap.mmap(fds[0], int(msg["nbytes"]))
            outs = mmap.mmap(fds[1], int(msg["out_bytes"]))
            _channel.close_all(fds)
            self.slots = {"shape": int(msg["shape"]), "raw": torch.frombuffer(slots, dtype=torch.uint8),
                          "size": int(msg["nbytes"]), "out": outs, "out_raw": torch.frombuffer(outs, dtype=torch.uint8),
                          "out_size": int(msg["out_bytes"]), "maps": (slots, outs)}

    def drop_slots(self) -> None:
        """Unmap the previous shape's slots (and unregister its marker page)."""
        self.held = []
        old, self.slots = self.slots, None
        if old and self.device == "cuda":
            self.sync()
            old["raw"] = None
            old["mem"].close()

    def inputs_of(self, entries) -> tuple:
        """A call's inputs, each a tensor whose storage is its own bytes of the slots alone: through
        torch (untyped_storage(), as_strided) a kernel sees neither the other calls' inputs, which are
        in place before the gate opens (computed ahead, a batch's calls would be timed as one), nor
        the gate and marker words. A raw address still reaches them: docs/evaluator.md."""
        raw, size = self.slots["raw"], self.slots["size"]
        out = []
        for e in entries:
            if "value" in e:
                out.append(e["value"])
                continue
            whole = _exchange.view(raw, e, size)  # checked against the slots first
            off, n = int(e["offset"]), int(e["nbytes"])
            out.append(_exchange.view(self.own_bytes(off, n), {**e, "offset": 0}, n) if n else whole)
        return tuple(out)

    def own_bytes(self, off: int, n: int):
        """A uint8 tensor over bytes [off, off + n) of the slots, with a storage of those bytes only."""
        if self.device == "cuda":
            return self.as_tensor(_cuda.DeviceArray(self.slots["raw"].data_ptr() + off, n), device="cuda")
        return self.frombuffer(self.slots["maps"][0], dtype=self.torch.uint8, count=n, offset=off)

    def place_output(self, t, dest: dict | None) -> tuple[dict | None, str | None]:
        """Where output t is for the judge: (entry, None) or (None, why not)."""
        shape, stride = list(t.shape), list(t.stride())
        if not _exchange.dense(shape, stride):
            return None, f"strides {tuple(stride)} for shape {tuple(shape)} overlap or leave gaps"
        n = t.numel() * t.element_size()
        dtype = str(t.dtype).removeprefix("torch.")
        if self.device == "cuda":
            span = (t.data_ptr(), t.data_ptr() + n)
            reused = any(span[0] < b and a < span[1] for a, b in self.spans + self.kept)  # another call's, or kept
            found = self.pool.locate(t.data_ptr(), n) if n and not reused else (0, 0) if not n else None
            if found is None:  # not born in the pool, or to be overwritten: copied now, as part of the call
                with self.pool.active():
                    dst = self.empty_strided(shape, stride, dtype=t.dtype, device="cuda")
                self.copy(dst, t)
                self.held.append(dst)
                self.outputs_copied = True
                found = self.pool.locate(dst.data_ptr(), n) if n else (0, 0)
                if found is None:
                    return None, "the output could not be placed where the judge reads it"
            sid, off = found
            self.spans.append((self.pool.segments[sid].ptr + off, self.pool.segments[sid].ptr + off + n) if n else (0, 0))
            return {"seg": sid, "offset": off, "dtype": dtype, "shape": shape, "stride": stride, "nbytes": n}, None
        # CPU: the raw bytes of the output's span into the judge's memfd (no tensor method runs)
        off, room = int(dest["offset"]), int(dest["nbytes"])
        if n > room:
            return {"seg": 0, "offset": off, "dtype": dtype, "shape": shape, "stride": stride, "nbytes": n}, None
        if n:
            ctypes.memmove(self.slots["out_raw"].data_ptr() + off, t.data_ptr(), n)
        return {"seg": 0, "offset": off, "dtype": dtype, "shape": shape, "stride": stride, "nbytes": n}, None

    def one(self, index: int, entries, dest, first: bool, check: bool) -> dict:
        """Call the kernel on one slot's inputs; the call's report."""
        torch = self.torch
        rep = {"reason": None, "message": None, "failures": {}, "entries": None}
        ins = self.inputs_of(entries)
        if self.signature_checked != index:
            self.signature_checked = index
            try:
                inspect.signature(self.fn).bind(*ins)
            except TypeError as e:
                rep.update(reason="bad_signature",
                           message=f"kernel{inspect.signature(self.fn)} cannot take the {len(ins)} inputs: {e}")
                return rep
            except ValueError:
                pass  # no signature to inspect (a builtin): let the call decide
        if check:
            with self.pool.active() if self.pool else _nothing():
                self.poison(sum(t.numel() * t.element_size() for t in ins if isinstance(t, torch.Tensor)))
        with self.pool.active() if self.pool else _nothing():
            out, reason, message = self.call(ins, first=first)
        fails = rep["failures"]
        if (why := clear_hooks(torch)) is not None:
            fails["hook_active"] = f"{why} when the call returned"
        if reason and reason != "thread_injection":
            rep.update(reason=reason, message=message, fatal=reason in ("crash", "oom"))
            return rep
        if reason:  # a thread pool of the kernel's own: said, not held against it (the judge's clock
            rep["threads"] = message  # and its reads of the outputs do not depend on the threads)
        outs = _tensors.as_list(out)
        if outs is None:
            rep.update(reason="output_not_dense",
                       message=f"kernel returned {type(out).__name__}; expected a torch.Tensor (or a tuple of them)")
            return rep
        if _tensors.aliases(outs, (*ins, self.slots["raw"])):  # any slot's memory, the header's too
            fails.setdefault("output_aliases_input", "an output shares storage with an input")
        placed = []
        for i, t in enumerate(outs):
            if not isinstance(t, torch.Tensor):
                placed.append({"value": t})
                continue
            if (why := _tensors.layout_problem(t)) is not None:
                rep.update(reason="output_not_dense", message=f"output is not a plain dense tensor: {why}")
                return rep
            if t.device.type != self.device:
                rep.update(reason="wrong_device", message=f"output on {t.device}, inputs on {self.device}")
                return rep
            e, why = self.place_output(t, (dest or [None] * len(outs))[i] if dest else None)
            if e is None:
                rep.update(reason="output_not_dense", message=why)
                return rep
            placed.append(e)
            if self.device == "cuda":
                self.remember(t)
        self.held.append(out)
        rep["entries"] = placed
        return rep

    def on_call(self, msg: dict, fds=()) -> None:
        """One batch, on the shape's slots (a GPU's, behind the gate) or, on a CPU, on slots of its
        own the message brings: its inputs, in memory this process never mapped before they were sent."""
        shape_slots = self.slots
        if len(fds) == 1 and self.device == "cpu" and shape_slots is not None:
            batch = mmap.mmap(fds[0], int(msg["nbytes"]))
            self.slots = {**shape_slots, "raw": self.frombuffer(batch, dtype=self.torch.uint8),
                          "size": int(msg["nbytes"]), "maps": (batch, shape_slots["out"])}
        _channel.close_all(fds)
        try:
            self.one_batch(msg)
        finally:
            self.slots = shape_slots

    def one_batch(self, msg: dict) -> None:
        """The calls on the slots the judge names, gated or not; reports every call ("called"). The
        watch's profile lasts until the device has run the batch (its kernels are recorded as they
        end), so a gated batch, reported once queued, is followed by "ran" with what the watch saw;
        an ungated one is synchronised first and reported once."""
        index, calls = int(msg["shape"]), msg["calls"]
        batch, gated, check = int(msg.get("batch", 0)), bool(msg.get("gated")), bool(msg.get("check"))
        self.forget_batch()
        self.spans: list[tuple[int, int]] = []  # the batch's outputs so far, where the judge will read them
        self.outputs_copied = False
        reply = {"shape": index, "batch": batch, "calls": [], "failures": {}}
        if self.slots is None or self.slots["shape"] != index:
            reply["failures"]["driver_tampered"] = "a call before its shape's slots"
            self.ch.send("called", **reply)
            return self.ch.send("ran", batch=batch, failures={}, kernels=[]) if gated else None
        first = bool(msg.get("first"))
        # a library's warm-up call compiles and autotunes: left unwatched (ShapeJudge.warm_up)
        with self.ops.watch(on=not (msg.get("warm_up") and self.go.get("library"))):
            if gated:  # behind the watch's own first kernels, which must not wait for the gate
                _cuda.wait_value(self.stream, self.slots["gate"], batch)
            for c in calls:
                rep = self.one(index, c["inputs"], c.get("outputs"), first, check)
                first = False
                reply["calls"].append(rep)
                if rep["reason"]:
                    break
            if gated:
                _cuda.write_value(self.stream, self.slots["marker"], batch)
                self.report(reply)
                self.sync()  # the batch ran once the judge opened the gate; the outputs stay held
            else:
                try:
                    self.sync()
                except BaseException as e:
                    reply["calls"].append({"reason": classify(e), "message": _tb(e), "failures": {}, "entries": None,
                                           "fatal": True})
        if gated:
            return self.ch.send("ran", batch=batch, failures=self.ops.findings(), kernels=self.ops.take_kernels(),
                                watch_lost=self.ops.lost)
        reply["failures"].update(self.ops.findings())
        reply["kernels"], reply["watch_lost"] = self.ops.take_kernels(), self.ops.lost
        self.report(reply)

    def report(self, reply: dict) -> None:
        """Send a batch's report ("called"), with the guard's findings and the output pool's new
        segments."""
        reply["watched_threads"] = self.ops.threads
        reply["failures"].update(self.failures_now())
        reply["copied"] = self.outputs_copied
        new = []
        if self.pool is not None:
            new = self.pool.new_fds()
            if self.pool.failed:
                reply["failures"]["oom"] = f"the output pool could not grow: {self.pool.failed}"
        _channel.send_with_segments(self.ch, "called", new, **reply)

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
        failures = self.failures_now()  # tampering at import: reported, and the kernel still judged
        if (why := clear_hooks(self.torch)) is not None:
            failures["hook_active"] = why
        self.ch.send("import", reason=None, failures=failures)
        self.serve()

    def serve(self, other=None) -> None:
        """Answer the judge until "done". other(msg): handles a message of another kind (the
        library process switching functions); without it such a message ends the run."""
        while True:
            msg, fds = self.ch.recv(None)
            kind = msg.get("kind")
            if kind == "slots" and len(fds) == (1 if self.device == "cuda" else 2):
                self.on_slots(msg, fds)
            elif kind == "call":
                self.on_call(msg, fds)
            elif kind == "release":
                self.drop_slots()
                if self.device == "cuda":
                    self.torch.cuda.empty_cache()
            elif kind == "done":
                return
            elif other is not None:
                _channel.close_all(fds)
                other(msg)
            else:
                _channel.close_all(fds)
                return


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def prepare(device_request: str, watch: bool = True):
    """Imports and captures, before any submitted code: returns (torch, device, snapshot, pool,
    _watch.Sealed or None). watch: the driver will watch dispatched operators (a candidate's, not
    the library process's): the profiler's switches become the watch's alone (seal_switches). The
    profile's first start (on a GPU in either process: it records the device's kernels), about a
    second of setup, is taken now, in a process started ahead of its evaluation."""
    import torch

    from ablate.evaluate import _gpu

    device = _gpu.resolve_device(device_request)
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    else:
        torch.zeros(1, device="cuda")  # the CUDA context, while waiting for "go"
    try:
        import triton  # noqa: F401  (imported now: the submission's own import is then cheap)
        if device == "cuda":  # Triton's launcher utilities (a C compile) and its compiler's start: now,
            _gpu.warm_triton_compiler(triton.runtime.driver.active.get_current_target())  # in a fresh cache
    except Exception:  # no triton, or one that cannot start: the submission finds out itself
        pass
    sealed = seal_switches(torch) if watch else None
    if watch or device == "cuda":  # a GPU's watch records the device's kernels in the library process too
        with OpWatch(("(warm-up)",), sealed, device).watch():
            pass
    pool = None
    if device == "cuda":
        import torch.multiprocessing.reductions  # noqa: F401  (the driver's weak references to outputs)

        from ablate.evaluate._pool import OutputPool

        _cuda.lib()  # loaded now: the integrity snapshot below sees the module as the driver will use it
        pool = OutputPool()
    return torch, device, _integrity.Snapshot(), pool, sealed


def _forget_kit(finder) -> None:
    """The kit's modules leave sys.modules and its finder the import system: the submission
    cannot import them (its `import ablate...` finds nothing) and holds no path to the copies
    this process runs."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
    for name in list(sys.modules):
        if name.split(".")[0] == "ablate":
            del sys.modules[name]


def run(go: dict, ch, torch, device: str, snapshot, finder, pool=None, sealed=None) -> int:
    ch.send_key = bytes.fromhex(go["key"])  # from now on only the driver can speak
    if go.get("device") != device:
        ch.send("import", reason="crash", message=f"candidate sees device {device}, judge {go.get('device')}",
                failures={})
        return 1
    from ablate.operators import _entries

    guard_log = _guard.install(os.path.dirname(go["submission"]), go["kit"])
    driver = Driver(go, torch, device, snapshot, ch, guard_log, pool, sealed)
    driver.entries = _entries
    _forget_kit(finder)
    driver.run(go["submission"])
    return 0


def _serve(fd: int, prepared, finder) -> int:
    from ablate.evaluate import _gpu

    torch, device, snapshot, pool, sealed = prepared
    _gpu.cpu_threads_warm()
    ch = _channel.Channel.from_fd(fd, encode=_channel.c_encoder())
    ch.send("hello", pid=os.getpid())
    got = ch.recv(None)
    msg = got[0] if got else {}
    if msg.get("kind") != "go":
        return 0  # the judge gave up before starting (a bad request)
    code = run(msg, ch, torch, device, snapshot, finder, pool, sealed)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def boot(finder, kit: str, fd: str) -> int:
    """From BOOT: one evaluation in this fresh interpreter (set up, wait for the judge's "go")."""
    prepared = prepare(os.environ.get("ABLATE_EVAL_DEVICE", "auto"))
    try:
        code = _serve(int(fd), prepared, finder)
    except _channel.Closed:
        code = 0
    # Everything is reported: skip the interpreter's and CUDA's orderly teardown (about a second
    # with GBs of inputs on the device); the evaluation ends when this process does.
    os._exit(code)
