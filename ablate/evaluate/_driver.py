"""The candidate process: imports the submission, runs it on freshly drawn inputs, and reports
outputs, local checks and timings through a private channel (a result file, every line carrying
the judge's nonce); what the submission prints is never read.

Two ways in, the same run: `python -m ablate.evaluate._driver` (a fresh interpreter, the GPU path:
prepare(), then wait for one JSON line "go" on stdin) or a child forked by the warm CPU zygote
(_zygote, which ran prepare() once). Everything the driver relies on is captured in prepare(),
before the submission is imported, and checked for identity afterwards.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import os
import random
import sys
import threading
import time
import traceback

_perf = time.perf_counter


class Channel:
    """Append-only JSON lines, each tagged with the nonce."""

    def __init__(self, path: str, nonce: str):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._nonce, self._write, self._dumps = nonce, os.write, json.dumps

    def send(self, kind: str, **data) -> None:
        self._write(self._fd, (self._dumps({"nonce": self._nonce, "kind": kind, **data}) + "\n").encode())


def _tb(exc: BaseException, limit: int = 4000) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text if len(text) <= limit else "..." + text[-limit:]


def _native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class Driver:
    def __init__(self, go: dict, torch, device: str, snapshot, ch: Channel):
        from ablate.evaluate._common import load_operator
        from operators import shape_id

        self.go, self.torch, self.device, self.snapshot, self.ch = go, torch, device, snapshot, ch
        self.op = load_operator(go["operator"], go.get("operator_node"))
        self.shape_id = shape_id
        self.rng = random.Random(os.urandom(16))  # which timed calls are checked: not derivable from the seed
        self.native_base: int | None = None
        self.fn = None
        self.l2 = None
        self.call_ms: list[float] = []  # correctness-call times: the CPU timing's estimate

    # -- helpers -----------------------------------------------------------------------------
    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def tampered(self) -> dict[str, str]:
        found = self.snapshot.tampered()
        return {k: "replaced: " + ", ".join(v) for k, v in found.items() if v}

    def poison(self, nbytes: int) -> None:
        """Fill memory the allocator will hand out next with NaN bit patterns (0xFF bytes)."""
        if nbytes > 0:
            p = self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device)
            p.fill_(0xFF)
            del p

    def out_bytes(self, inputs) -> int:
        """Bytes to poison: the inputs' size, a bound on most outputs (running the reference on
        the meta device would say exactly, but costs seconds of imports)."""
        torch = self.torch
        return sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))

    def call(self, inputs, first: bool = False) -> tuple[object, str | None, str | None]:
        """(output, reason, message): run the kernel once, synchronised, watching threads."""
        py_before = set(threading.enumerate())
        t0 = _perf()
        try:
            out = self.fn(*inputs)
            self.sync()
            self.call_ms.append((_perf() - t0) * 1e3)
        except BaseException as e:  # SystemExit and friends included: the kernel must return
            from ablate.evaluate._common import classify

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

    # -- one shape ---------------------------------------------------------------------------
    def run_shape(self, index: int, shape: dict) -> dict:
        from ablate.evaluate import _compare, _outputs
        from ablate.evaluate._common import input_sets, set_seed, timing_sources

        torch, go = self.torch, self.go
        key = self.shape_id(shape)
        sets = input_sets(go["draws"])
        inputs = [self.op.make_inputs(shape, set_seed(go["seed"], key, dist, d), self.device, dist) for dist, d in sets]
        report = {"index": index, "files": [], "failures": {}, "timing": None, "timed": [],
                  "seconds": {"check": 0.0, "outputs": 0.0, "timing": 0.0}}
        spent = report["seconds"]
        t_shape = _perf()
        fail = report["failures"]
        try:
            inspect.signature(self.fn).bind(*inputs[0])
        except TypeError as e:
            fail["bad_signature"] = f"kernel{inspect.signature(self.fn)} cannot take the {len(inputs[0])} inputs: {e}"
            return report
        except ValueError:
            pass  # no signature to inspect (a builtin): let the call decide
        nbytes = self.out_bytes(inputs[0])
        sources, pristine = set(timing_sources(go["draws"])), {}
        self.call_ms = []
        for k, ins in enumerate(inputs):
            clones = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in ins)
            self.poison(nbytes)
            out, reason, msg = self.call(ins, first=k == 0)
            if reason and reason != "thread_injection":
                fail.setdefault(reason, f"{sets[k][0]} draw {sets[k][1]}: {msg}")
                report["fatal"] = reason in ("crash", "oom")
                return report
            if reason:
                fail.setdefault(reason, msg)
            outs = _compare.as_list(out)
            if outs is None:
                fail.setdefault("output_not_dense",
                                f"kernel returned {type(out).__name__}; expected a torch.Tensor (or a tuple of them)")
                return report
            for t in (t for t in outs if isinstance(t, torch.Tensor)):
                if (why := _compare.layout_problem(t)) is not None:
                    fail.setdefault("output_not_dense", f"output is not a plain dense tensor: {why}")
                if t.device.type != self.device:
                    fail.setdefault("wrong_device", f"output on {t.device}, inputs on {self.device}")
            if _compare.aliases(outs, ins):
                fail.setdefault("output_aliases_input", "an output shares storage with an input")
            for a, b in zip(ins, clones):
                if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                    fail.setdefault("input_mutated", f"{sets[k][0]} draw {sets[k][1]}: an input changed during the call")
            t_save = _perf()
            path = os.path.join(go["outdir"], f"s{index}_c{k}.out")
            item = {"file": path, "entries": _outputs.write(path, outs)}
            report["files"].append(item)
            self.ch.send("output", index=index, set=k, **item)  # the judge checks it while we go on
            spent["outputs"] += _perf() - t_save
            if k in sources:
                pristine[k] = clones  # untouched copies: what the timed loop refills its inputs from
        fail.update(self.tampered())
        spent["check"] = _perf() - t_shape - spent["outputs"]
        spent["first_call_ms"] = self.call_ms[0] if self.call_ms else None  # compiles a new specialisation
        # timing numbers from a tampered process are worthless, and a kernel that leaves threads
        # running would start one per timed call (thousands); correctness is judged elsewhere
        if go["timing"] and not fail.keys() & {"output_not_dense", "wrong_device", "timer_tampered", "driver_tampered",
                                               "thread_injection"}:
            self.time_shape(index, [pristine[k] for k in timing_sources(go["draws"])], report)
        return report

    def time_shape(self, index: int, sources: list, report: dict) -> None:
        from ablate.evaluate import _outputs, _timing
        from ablate.evaluate._common import classify, gpu_lock, timing_sources

        torch, go = self.torch, self.go
        t_timing = _perf()
        live = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in sources[0])
        try:
            with gpu_lock(go["lock"], exclusive=True):
                est = sorted(self.call_ms)[len(self.call_ms) // 2] if self.call_ms else None
                result, kept = _timing.measure(self.fn, live, sources, device=self.device, rng=self.rng,
                                               graph=go["cuda_graph"], l2=self.l2, est_ms=est)
        except BaseException as e:
            reason = classify(e)
            if go["cuda_graph"] and "graph" in _tb(e).lower() and reason == "exception":
                reason = "graph_capture_failed"
            report["failures"].setdefault(reason, f"during timing: {_tb(e)}")
            report["fatal"] = reason in ("crash", "oom")
            return
        if result.pop("l2_persistence", False):
            report["failures"]["l2_persistence"] = ("persisting L2 was reserved or an access-policy window set "
                                                    "during a timed call")
        report["failures"].update(self.tampered())
        src = timing_sources(go["draws"])
        t_save = _perf()
        for j, (call_index, outs) in sorted(kept.items()):
            path = os.path.join(go["outdir"], f"s{index}_t{j}.out")
            report["timed"].append({"set": src[j], "call": call_index, "file": path,
                                    "entries": _outputs.write(path, outs)})
        report["seconds"]["outputs"] += _perf() - t_save
        report["seconds"]["timing"] = t_save - t_timing
        report["timing"] = result
        report["l2_checked"] = bool(self.l2 is not None and self.l2.available)

    # -- the whole run -----------------------------------------------------------------------
    def run(self, path: str) -> None:
        from ablate.evaluate._common import classify

        if self.device == "cuda":  # snapshot persisting-L2 state before the candidate's code runs
            import torch

            from ablate.evaluate._gpu import L2Guard

            torch.zeros(1, device="cuda")  # a current context, so the driver calls can answer
            self.l2 = L2Guard()
        spec = importlib.util.spec_from_file_location("kernel", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["kernel"] = module
        try:
            spec.loader.exec_module(module)
        except SyntaxError as e:
            return self.ch.send("import", reason="syntax_error", message=_tb(e))
        except BaseException as e:
            reason = classify(e)
            return self.ch.send("import", reason="import_error" if reason == "exception" else reason, message=_tb(e))
        try:
            self.fn = self.op.kernel_of(module)  # `kernel`, or what the operator's entry builds (ModelNew)
        except ValueError as e:
            return self.ch.send("import", reason="no_kernel_function", message=str(e))
        except BaseException as e:
            return self.ch.send("import", reason="import_error", message=_tb(e))
        if not callable(self.fn):
            return self.ch.send("import", reason="no_kernel_function", message="kernel.py defines no callable kernel")
        failures = self.tampered()  # tampering is reported and the kernel still judged
        if self.l2 is not None:
            if self.l2.available and self.l2.used():
                failures["l2_persistence"] = "persisting L2 reserved at import"
                self.l2.reset()
        self.ch.send("import", reason=None, failures=failures)
        for i, shape in enumerate(self.op.shape_set(self.go["shape_set"])):
            self.ch.send("progress", index=i)
            report = self.run_shape(i, shape)
            self.ch.send("shape", **report)
            if report.get("fatal"):
                break
            self.sync()
        self.ch.send("done")


def prepare(device_request: str):
    """Imports and captures, before any submitted code: returns (torch, device, snapshot)."""
    import torch

    from ablate.evaluate import _gpu

    device = _gpu.resolve_device(device_request)
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    else:
        torch.zeros(1, device="cuda")  # the CUDA context, while waiting for "go" (a fresh process: no fork)
    try:
        import triton  # noqa: F401  (imported now: the submission's own import is then cheap)
        if device == "cuda":  # Triton builds its launcher utilities (a C compile) on first use: now,
            triton.runtime.driver.active.get_current_target()  # in this evaluation's fresh cache
    except Exception:  # no triton, or one that cannot start: the submission finds out itself
        pass
    import operators  # noqa: F401

    from ablate.evaluate import _common, _compare, _integrity, _outputs, _timing

    return torch, device, _integrity.Snapshot([sys.modules[__name__], _common, _compare, _outputs, _timing, _gpu,
                                               _integrity])


def run(go: dict, torch, device: str, snapshot) -> int:
    from ablate.evaluate import _gpu

    _gpu.cpu_threads_warm()
    ch = Channel(go["result"], go["nonce"])
    if go["device"] != device:
        ch.send("import", reason="crash", message=f"driver sees device {device}, judge {go['device']}")
        return 1
    Driver(go, torch, device, snapshot, ch).run(go["kernel"])
    return 0


def main() -> int:
    """A fresh interpreter per evaluation (the GPU path): import, then wait for "go" on stdin."""
    torch, device, snapshot = prepare(os.environ.get("ABLATE_EVAL_DEVICE", "auto"))
    go = json.loads(sys.stdin.readline() or "null")
    if not go:
        return 0  # the judge gave up before starting (bad arguments)
    sys.stdin.close()
    code = run(go, torch, device, snapshot)
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is reported: skip the interpreter's and CUDA's orderly teardown (about a second
    # with GBs of input sets on the device); the evaluation ends when this process does.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
