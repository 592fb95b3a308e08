"""The judge process: validates the request, measures ceilings and baseline times, computes the
references (float64 on upcast inputs) and judges what the candidate process reported. It never
imports or runs the submission, so nothing the submission does can reach the references, the
comparison or the verdict.

It serves one evaluation after another (the supervisor keeps it warm, so torch is imported
once, not once per evaluation). Protocol, JSON lines on stdin/stdout: a request; the judge
answers "ready" (or "error"); later {"kind": "end", ...} tells how the candidate process ended;
the judge answers "result". The candidate's reports are read from the result file and must
carry the evaluation's nonce. End of stdin ends the judge.
"""
from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import random
import signal
import sys
import time
import traceback
from pathlib import Path

from ablate.evaluate._common import (Lines, dumps, finite, gpu_lock, input_sets, load_operator, set_seed,
                                     timing_sources)
from ablate.evaluate._reasons import REASONS

FLOOR_MARGIN = 0.5  # reject times below half the roofline minimum (writes can land in L2 first)
# the device busy after the timed stream is done, by more than 50 us and a quarter of the event
# time: work was left on another stream (an idle device syncs in a few microseconds)
STREAM_LAG_MS, STREAM_LAG_FRACTION = 0.05, 0.25
PER_SHAPE = ("bad_signature", "exception", "output_not_dense", "wrong_shape", "wrong_dtype", "wrong_device",
             "incorrect", "input_mutated", "output_aliases_input", "thread_injection")


class Tail:
    """Reads the candidate's result file as it grows; keeps only lines carrying the nonce."""

    def __init__(self, path: str, nonce: str):
        self.path, self.nonce, self.pos, self.buf = path, nonce, 0, b""
        self.imported = None  # the "import" message
        self.progress = -1
        self.shapes: dict[int, dict] = {}
        self.outputs: dict[tuple[int, int], dict] = {}  # (shape, set): {"file", "entries"}, sent as written
        self.done = False
        self.forged = 0

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except OSError:
            return
        self.pos += len(data)
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
                assert isinstance(msg, dict) and msg.get("nonce") == self.nonce
            except (ValueError, AssertionError):
                self.forged += 1
                continue
            try:
                self.take(msg)
            except (KeyError, TypeError, ValueError):
                self.forged += 1  # well-formed JSON, but not a report the driver writes

    def take(self, msg: dict) -> None:
        kind = msg.get("kind")
        if kind == "import":
            if self.imported is not None:
                self.forged += 1  # the driver reports each step once: a second report is forged
            self.imported = self.imported or msg
        elif kind == "progress":
            self.progress = int(msg["index"])
        elif kind == "shape":
            index = int(msg["index"])
            if index in self.shapes:
                self.forged += 1
            self.shapes.setdefault(index, msg)
        elif kind == "output":
            key = (int(msg["index"]), int(msg["set"]))
            if key in self.outputs:
                self.forged += 1
            self.outputs.setdefault(key, {"file": msg["file"], "entries": msg["entries"]})
        elif kind == "done":
            self.done = True


def _operator_hash(op, node: dict | None) -> str:
    """Identifies the operator's definition (its folder's code, its task files, how it was
    loaded): part of the baseline cache key, so an edited operator is measured again."""
    import operators

    h = hashlib.sha256(json.dumps(node or {}, sort_keys=True, default=str).encode())
    files = set(Path(p) for p in op.task_files.values())
    if op.name in operators.REGISTRY:
        files |= set(Path(sys.modules[operators.REGISTRY[op.name]].__file__).parent.glob("*.py"))
    for p in sorted(files):
        try:
            h.update(p.name.encode() + p.read_bytes())
        except OSError:
            pass
    return h.hexdigest()[:16]


class Judge:
    def __init__(self, cfg: dict, send, lines: Lines | None = None):
        self.cfg, self.send, self.lines = cfg, send, lines
        self.end: dict | None = None
        self.rng = random.Random(os.urandom(16))
        self.candidate_start_s = 0.0  # from "ready" to the candidate's import report

    def note(self, message: str) -> None:
        """A progress line for whoever started the evaluation (the supervisor passes it on)."""
        if self.send is not None:
            self.send(kind="progress", message=message)

    # -- setup -------------------------------------------------------------------------------
    def setup(self):
        import torch

        from ablate.evaluate import _gpu, _static

        cfg = self.cfg
        self.torch = torch
        self.op = load_operator(cfg["operator"], cfg.get("operator_node"))
        self.shapes = self.op.shape_set(cfg["shape_set"])
        self.device = _gpu.resolve_device(cfg["device"])
        self.info = _gpu.device_info(self.device)
        tree, _ = _static.parse(Path(cfg["kernel"]).read_text(errors="replace"))
        self.passthrough = _static.passthrough(tree, self.op.library_calls) if tree else []
        if not cfg["timing"]:
            self.mode = "none"
        elif self.device == "cpu":
            self.mode = "cpu-interpreted"
        else:
            self.mode = "cuda-graph" if cfg["cuda_graph"] else "cuda-events"
        self.ceilings = None
        if self.device == "cuda" and cfg["timing"]:
            key = f"{self.info['name']}|{self.info['driver']}|torch {torch.__version__}"
            from ablate.evaluate import _cache

            self.ceilings = _cache.get("ceilings", key)
            if self.ceilings is None:
                self.note("measuring this GPU's copy bandwidth and matmul rate (once per GPU, then cached)")
                with gpu_lock(cfg["lock"], exclusive=True):
                    self.ceilings = _gpu.measure_ceilings()
                _cache.put("ceilings", key, self.ceilings)
        self.libs = _gpu.library_versions()
        self.op_hash = _operator_hash(self.op, cfg.get("operator_node"))

    # -- references --------------------------------------------------------------------------
    def inputs(self, shape: dict, k: int):
        from operators import shape_id

        dist, d = input_sets(self.cfg["draws"])[k]
        return self.op.make_inputs(shape, set_seed(self.cfg["seed"], shape_id(shape), dist, d), self.device, dist)

    def prepare(self, shape: dict, indices, keep_inputs: bool = True) -> dict:
        """{set index: (inputs or None, reference outputs)}, plus the expected (shape, dtype) list."""
        from ablate.evaluate._compare import upcast

        torch = self.torch
        refs, expected = {}, None
        for k in indices:
            with gpu_lock(self.cfg["lock"], exclusive=False):
                ins = self.inputs(shape, k)
                if expected is None:
                    expected = self.expected(ins)
                out = self.op.reference(*upcast(ins))
                outs = [out] if isinstance(out, torch.Tensor) else list(out)
                # kept in float32: computed in float64, its rounding is far below any tolerance
                outs = [t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in outs]
                # an operator's own check also needs the inputs (top-k checks indices against x)
                refs[k] = (ins if keep_inputs or self.op.check is not None else None, outs)
        return {"refs": refs, "expected": expected}

    def expected(self, ins) -> list[tuple[list[int], str]]:
        """Output shapes and dtypes of the contract: the reference on the original dtypes, once."""
        torch = self.torch
        out = self.op.reference(*ins)
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        return [(list(t.shape), str(t.dtype).removeprefix("torch.")) if isinstance(t, torch.Tensor) else (None, None)
                for t in outs]

    def tolerance(self, dtype: str) -> tuple[float, float]:
        if dtype in self.op.tolerance:
            return self.op.tolerance[dtype]
        if dtype.startswith(("int", "uint", "bool")):
            return (0.0, 0.0)
        raise RuntimeError(f"operator {self.op.name!r} gives no tolerance for {dtype}")

    def check_outputs(self, outs, prep: dict, k: int) -> tuple[dict[str, str], float | None]:
        """Failures {reason: message} of one set's outputs, and the max abs error."""
        from ablate.evaluate._compare import compare

        expected = prep["expected"]
        if not isinstance(outs, list) or len(outs) != len(expected):
            return {"wrong_shape": f"{len(outs) if isinstance(outs, list) else '?'} outputs, expected {len(expected)}"}, None
        fails, worst = {}, 0.0
        inputs, refs = prep["refs"][k]
        for t, (shape, dtype) in zip(outs, expected):
            if shape is None or not isinstance(t, self.torch.Tensor):
                continue  # a scalar output: compared below
            if list(t.shape) != shape:
                fails.setdefault("wrong_shape", f"output shape {list(t.shape)}, expected {shape}")
            elif str(t.dtype).removeprefix("torch.") != dtype:
                fails.setdefault("wrong_dtype", f"output dtype {str(t.dtype).removeprefix('torch.')}, expected {dtype}")
        if fails:
            return fails, None
        if self.op.check is not None:  # the operator's own rule (top-k ties, scaled tolerances)
            got = outs[0] if len(outs) == 1 else tuple(outs)
            ok, err, msg = self.op.check(got, refs[0] if len(refs) == 1 else tuple(refs), inputs)
            return ({} if ok else {"incorrect": msg}), float(err)
        for t, (shape, dtype), ref in zip(outs, expected, refs):
            if shape is None:  # a Python scalar output (FlashInfer definitions)
                t, ref = self.torch.as_tensor(t, dtype=self.torch.float64), self.torch.as_tensor(ref)
                dtype = "float32" if "float32" in self.op.tolerance else next(iter(self.op.tolerance))
            elif not isinstance(t, self.torch.Tensor):
                fails.setdefault("output_not_dense", f"a {type(t).__name__} where a tensor is expected")
                continue
            ok, err, msg = compare(t, ref, *self.tolerance(dtype))
            worst = err if math.isnan(err) or math.isnan(worst) else max(worst, err)
            if not ok:
                fails.setdefault("incorrect", msg)
        return fails, worst

    def load(self, item: dict, expected_path: str) -> list:
        """One set's outputs as the driver reported them ({"file", "entries"}), on the judge's device."""
        from ablate.evaluate import _outputs

        path = item["file"]
        if os.path.realpath(path) != os.path.realpath(expected_path) or not os.path.isfile(path):
            raise ValueError(f"output file {path!r} is not where the driver writes")
        return _outputs.read(path, item["entries"], self.device)

    # -- baselines ---------------------------------------------------------------------------
    def baselines(self, shape: dict) -> dict:
        """{"ms": {name: median}, "skipped": {name: reason}} for one shape."""
        from operators import shape_id

        from ablate.evaluate import _cache

        ms, skipped = {}, {}
        todo = []
        for name, b in self.op.baselines.items():
            if b.needs_cuda and self.device != "cuda":
                skipped[name] = "needs CUDA"
            elif (why := b.unavailable()) is not None:
                skipped[name] = why
            else:
                todo.append((name, b))
        if not todo:
            return {"ms": ms, "skipped": skipped}
        keys = {name: "|".join([self.info["name"], str(self.info["driver"]), json.dumps(self.libs, sort_keys=True),
                                self.op.name, self.op_hash, shape_id(shape), name, self.mode]) for name, _ in todo}
        cached = {name: _cache.get("baselines", keys[name]) for name, _ in todo} if self.device == "cuda" else {}
        prep = None
        for name, b in todo:
            entry = cached.get(name)
            if entry is None:
                if self.device == "cuda":  # minutes on a cold cache (torch.compile); cached after
                    self.note(f"{shape_id(shape)}: timing baseline {name} (once per GPU and versions, then cached)")
                if prep is None:  # one draw of each distribution: the timing sources
                    prep = self.prepare(shape, timing_sources(self.cfg["draws"]))
                entry = self.measure_baseline(b, prep)
                if self.device == "cuda":
                    _cache.put("baselines", keys[name], entry)
            if entry.get("error"):
                skipped[name] = entry["error"]
            else:
                ms[name] = entry["ms"]
        return {"ms": ms, "skipped": skipped}

    def measure_baseline(self, b, prep: dict) -> dict:
        from ablate.evaluate import _timing
        from ablate.evaluate._compare import as_list

        torch = self.torch
        try:
            for k, (ins, _) in prep["refs"].items():
                t0 = time.perf_counter()
                outs = as_list(b.fn(*ins))
                est = (time.perf_counter() - t0) * 1e3
                fails, _ = self.check_outputs(outs, prep, k)
                if fails:
                    return {"error": f"excluded, incorrect: {next(iter(fails.values()))}"}
            sources = [prep["refs"][k][0] for k in timing_sources(self.cfg["draws"])]
            live = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in sources[0])
            with gpu_lock(self.cfg["lock"], exclusive=True):
                result, _ = _timing.measure(b.fn, live, sources, device=self.device, rng=self.rng,
                                            graph=self.cfg["cuda_graph"], est_ms=est)
            return {"ms": result["median"]}
        except Exception as e:  # a broken library is reported, not fatal
            return {"error": f"raised {type(e).__name__}: {str(e)[:300]}"}

    # -- waiting for the candidate -----------------------------------------------------------
    def wait(self, tail: Tail, ready) -> bool:
        """Poll until ready() or the candidate ended; True when ready() holds."""
        while True:
            tail.poll()
            if ready():
                return True
            if self.end is not None:
                tail.poll()
                return ready()
            line = self.lines.get(0.02)
            if line is None:  # the supervisor is gone
                self.end = {"kind": "end", "returncode": None}
            elif line:
                self.end = json.loads(line)

    # -- judging -----------------------------------------------------------------------------
    def check_set(self, i: int, k: int, item, prep: dict) -> tuple[dict[str, str], float | None]:
        """Failures and max error of the outputs of input set k of shape i, as the driver reported them."""
        try:
            outs = self.load(item, os.path.join(self.cfg["outdir"], f"s{i}_c{k}.out"))
        except Exception as e:
            return {"driver_tampered": f"unreadable output: {e}"}, None
        f, err = self.check_outputs(outs, prep, k)
        dist, d = input_sets(self.cfg["draws"])[k]
        return {reason: f"{dist} draw {d}: {msg}" for reason, msg in f.items()}, err

    def judge_shape(self, i: int, shape: dict, prep: dict, report: dict, base: dict,
                    checked: dict | None = None) -> tuple[dict, dict, set]:
        """The row of shape i. `checked`: {set: (item, result of check_set)} done while the
        candidate was still running; each must match what its final report lists."""
        from operators import shape_id

        fails = {k: str(v) for k, v in (report.get("failures") or {}).items() if k in REASONS}
        ran = {"bad_signature", "exception"}
        row = self.row(shape, base)
        worst, files, checked = 0.0, report.get("files") or [], checked or {}
        for k, item in enumerate(files):
            if k in checked and checked[k][0] != item:
                fails.setdefault("driver_tampered", f"set {k}: the report lists other outputs than were sent")
                break
            f, err = checked[k][1] if k in checked else self.check_set(i, k, item, prep)
            for reason, msg in f.items():
                fails.setdefault(reason, msg)
            if "driver_tampered" in f:
                break
            if err is not None:
                worst = err if math.isnan(err) or math.isnan(worst) else max(worst, err)
        complete = len(files) == len(prep["refs"])
        if complete:
            ran |= set(PER_SHAPE)
        row["correct"] = complete and not fails.keys() & {"incorrect", "wrong_shape", "wrong_dtype", "exception",
                                                         "crash", "oom", "output_not_dense", "driver_tampered"}
        row["max_abs_error"] = finite(worst) if files else None
        timing = report.get("timing")
        if timing is not None:
            ran.add("stale_output")
            timed = report.get("timed") or []
            if sorted(t.get("set") for t in timed) != sorted(timing_sources(self.cfg["draws"])):
                fails.setdefault("stale_output", "outputs of the timed calls are missing")
            for t in timed:
                k = int(t["set"])
                try:
                    j = timing_sources(self.cfg["draws"]).index(k)
                    outs = self.load(t, os.path.join(self.cfg["outdir"], f"s{i}_t{j}.out"))
                except Exception as e:
                    fails.setdefault("driver_tampered", f"unreadable timed output: {e}")
                    continue
                f, _ = self.check_outputs(outs, prep, k)
                if f:
                    fails.setdefault("stale_output", f"timed call {t.get('call')}: {next(iter(f.values()))}")
            self.judge_time(row, shape, timing, fails, ran)
            if report.get("l2_checked"):
                ran.add("l2_persistence")
        if self.mode == "cuda-graph" and (timing is not None or "graph_capture_failed" in fails):
            ran.add("graph_capture_failed")
        row["error"] = "; ".join(f"{k}: {v}" for k, v in fails.items()) or None
        row["shape_id"] = shape_id(shape)
        return row, fails, ran

    def judge_time(self, row: dict, shape: dict, timing: dict, fails: dict, ran: set) -> None:
        try:
            t = {k: float(timing[k]) for k in ("median", "p10", "p90")}
            n, wall = int(timing["n"]), float(timing["wall_ms"])
            assert all(math.isfinite(v) and v >= 0 for v in (*t.values(), wall)) and n > 0
        except (KeyError, TypeError, ValueError, AssertionError):
            fails.setdefault("driver_tampered", f"malformed timing report: {timing!r:.200}")
            return
        row["time_ms"] = {**t, "n": n}
        row["wall_ms"] = wall
        med = t["median"]
        if row["baselines_ms"]:
            best = min(row["baselines_ms"], key=row["baselines_ms"].get)
            row["best_baseline"] = best
            row["speedup_vs_best"] = row["baselines_ms"][best] / med if med > 0 else None
        if self.device != "cuda":
            return
        ran.add("stream_mismatch")
        lag = timing.get("lag_ms")
        if isinstance(lag, (int, float)) and lag > max(STREAM_LAG_MS, STREAM_LAG_FRACTION * med):
            fails.setdefault("stream_mismatch", f"the device stayed busy {lag:.4f} ms after the timed stream finished "
                                                f"(events: {med:.4f} ms; wall-clock with a full sync: {wall:.4f} ms)")
        if self.ceilings:
            ran.add("below_roofline")
            floor_ms = max(self.op.bytes(shape) / (self.ceilings["copy_gbps"] * 1e9),
                           self.op.flops(shape) / (self.ceilings["matmul_tflops"] * 1e12)) * 1e3
            row["sol_fraction"] = floor_ms / med if med > 0 else None
            if med < FLOOR_MARGIN * floor_ms:
                c = self.ceilings
                fails.setdefault("below_roofline", f"{med:.4f} ms is below the physical floor {floor_ms:.4f} ms "
                                                    f"(copy {c['copy_gbps']} GB/s, matmul {c['matmul_tflops']} TFLOP/s)")

    def row(self, shape: dict, base: dict | None) -> dict:
        from operators import shape_id

        base = base or {"ms": {}, "skipped": {}}
        return {"shape": shape, "shape_id": shape_id(shape), "correct": False, "max_abs_error": None, "error": None,
                "time_ms": None, "wall_ms": None, "baselines_ms": dict(base["ms"]),
                "baselines_skipped": dict(base["skipped"]),
                "best_baseline": None, "speedup_vs_best": None, "sol_fraction": None}

    # -- the whole evaluation ----------------------------------------------------------------
    def run(self) -> None:
        self.setup()
        cfg = self.cfg
        bases = [self.baselines(s) if cfg["timing"] else None for s in self.shapes]
        self.send(kind="ready", device=self.device)
        tail = Tail(cfg["result"], cfg["nonce"])
        reasons: dict[str, str] = {}
        ran = {"missing_file", "syntax_error", "library_passthrough", "crash", "timeout", "oom"}
        if self.passthrough:
            reasons["library_passthrough"] = "uses " + ", ".join(self.passthrough)
        rows: list[dict] = []
        t_ready = time.perf_counter()
        imported = self.wait(tail, lambda: tail.imported is not None)
        self.candidate_start_s = time.perf_counter() - t_ready
        msg = tail.imported or {}
        failures = msg.get("failures") if isinstance(msg.get("failures"), dict) else {}
        for k, v in failures.items():  # tampering found at import: reported, and the kernel still judged
            if k in REASONS:
                reasons.setdefault(k, f"after import: {v}")
        if imported and msg.get("reason"):
            code = str(msg["reason"])
            reasons.setdefault(code if code in REASONS else "driver_tampered", str(msg.get("message")))
        elif imported:
            ran |= {"no_kernel_function", "import_error", "timer_tampered", "driver_tampered"}
            rows = self.judge_shapes(tail, bases, reasons, ran)
        self.wait(tail, lambda: False)  # until the supervisor reports how the candidate ended
        self.send(kind="result", result=self.assemble(tail, rows, reasons, ran, bases))

    def judge_shapes(self, tail: Tail, bases: list, reasons: dict, ran: set) -> list[dict]:
        """Rows of the shapes the candidate reported, in order; their failures go into `reasons`."""
        rows = []
        for i, shape in enumerate(self.shapes):
            try:
                row, fails, shape_ran = self.shape_result(i, shape, tail, bases[i])
            except self.torch.OutOfMemoryError as e:  # the candidate can fill the device the judge shares
                _release_memory()
                row, shape_ran = self.row(shape, bases[i]), set()
                first = str(e).splitlines()[0] if str(e) else "out of memory"
                fails = {"oom": f"the device ran out of memory while the judge checked this shape: {first}"}
                row["error"] = fails["oom"]
            if row is None:
                break  # the candidate ended before reporting this shape
            rows.append(row)
            ran |= shape_ran
            t = row.get("time_ms") or {}
            self.note(f"shape {i + 1}/{len(self.shapes)} {row['shape_id']}: "
                      + ("correct" if row["correct"] else "not correct")
                      + (f", {t['median']:.4g} ms" if t.get("median") is not None else "")
                      + (f" ({', '.join(fails)})" if fails else ""))
            for f in Path(self.cfg["outdir"]).glob(f"s{i}_*.out"):  # outputs can be GBs: free them now
                f.unlink(missing_ok=True)
            for k, v in fails.items():
                reasons.setdefault(k, f"{row['shape_id']}: {v}")
            if "oom" in fails:
                break
        return rows

    def shape_result(self, i: int, shape: dict, tail: Tail, base: dict | None) -> tuple[dict | None, dict, set]:
        """Judge shape i: each set's outputs as soon as the candidate sends them (while it runs the
        next set), then the rest of its report. (None, {}, set()) when it never reported the shape."""
        lock = self.cfg["lock"]
        t0 = time.perf_counter()
        prep = self.prepare(shape, range(len(input_sets(self.cfg["draws"]))), keep_inputs=False)
        t1 = time.perf_counter()
        checked: dict[int, tuple] = {}
        busy = 0.0

        def drain() -> bool:
            nonlocal busy
            for (index, k), item in list(tail.outputs.items()):
                if index == i and k not in checked and 0 <= k < len(prep["refs"]):
                    t = time.perf_counter()
                    with gpu_lock(lock, exclusive=False):  # never while the candidate is being timed
                        checked[k] = (item, self.check_set(i, k, item, prep))
                    busy += time.perf_counter() - t
            return i in tail.shapes

        if not self.wait(tail, drain):
            return None, {}, set()
        t2 = time.perf_counter()
        try:
            with gpu_lock(lock, exclusive=False):
                row, fails, shape_ran = self.judge_shape(i, shape, prep, tail.shapes[i], base, checked)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            row, shape_ran = self.row(shape, base), set()
            fails = {"driver_tampered": f"malformed report: {type(e).__name__}: {e}"}
            row["error"] = fails["driver_tampered"]
        row["seconds"] = {"references": round(t1 - t0, 4), "comparing_while_running": round(busy, 4),
                          "waiting": round(t2 - t1 - busy, 4), "comparing_after": round(time.perf_counter() - t2, 4),
                          "candidate": _reported_seconds(tail.shapes[i].get("seconds"))}
        return row, fails, shape_ran

    def assemble(self, tail: Tail, rows: list, reasons: dict, ran: set, bases: list) -> dict:
        end = self.end or {}
        stopped = None
        if end.get("timed_out"):
            stopped = "timeout"
            reasons.setdefault("timeout", f"no result within {end.get('limit_s')} s")
        elif end.get("oom"):
            stopped = "oom"
            reasons.setdefault("oom", f"memory above the {end.get('memory_limit_gb')} GB limit")
        elif not tail.done and not (tail.imported or {}).get("reason") and not any(
                r.get("fatal") for r in tail.shapes.values()):
            stopped = "crash"
            rc = end.get("returncode")
            how = f"exited with code {rc}"
            if isinstance(rc, int) and rc < 0:
                name = f" ({signal.Signals(-rc).name})" if -rc in signal.valid_signals() else ""
                how = f"was killed by signal {-rc}{name}"
            log = (end.get("log_tail") or "")[-1500:].strip()
            tail_text = f"; its output ends: {log}" if log else ""
            reasons.setdefault("crash", f"the candidate process {how} before finishing{tail_text}")
        if end.get("parent_killed"):
            reasons.setdefault("driver_tampered", "the process that started the candidate was killed during its run")
        if tail.forged:
            reasons.setdefault("driver_tampered", f"{tail.forged} report line(s) not written by the driver "
                                                  "(no nonce, or a step reported twice)")
        for i in range(len(rows), len(self.shapes)):
            row = self.row(self.shapes[i], bases[i])
            if stopped and i == max(tail.progress, 0):
                row["error"] = f"{stopped} while running this shape"
            else:
                row["error"] = "not run: the candidate stopped earlier"
            rows.append(row)
        order = list(REASONS)
        codes = sorted(reasons, key=order.index)
        checks = {c: "fail" if c in reasons else "pass" if c in ran else "skip" for c in order}
        accepted = not codes
        speedups = [r["speedup_vs_best"] for r in rows]
        geomean = None
        if accepted and speedups and all(s and s > 0 for s in speedups):
            geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        timing = self.mode if any(r["time_ms"] for r in rows) else "none"
        return {
            "verdict": "accepted" if accepted else "rejected", "reasons": codes,
            "details": {c: reasons[c] for c in codes},
            "operator": self.op.name, "shape_set": self.cfg["shape_set"], "timing": timing,
            "device": self.info, "ceilings": self.ceilings, "checks": checks,
            "shapes": rows,
            "geomean_speedup": geomean, "draws": self.cfg["draws"],
            "candidate_start_s": round(self.candidate_start_s, 3),
        }


def _reported_seconds(seconds) -> dict | None:
    """The candidate's own account of where its time went (diagnostic only: never judged)."""
    if not isinstance(seconds, dict):
        return None
    return {str(k)[:20]: round(float(v), 4) for k, v in list(seconds.items())[:8]
            if isinstance(v, (int, float)) and math.isfinite(v)}


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed in this process goes to stderr, never into the protocol
    sys.stdout = sys.stderr

    def send(**msg):
        proto.write(dumps(msg) + "\n")
        proto.flush()

    from ablate.errors import AblateError

    lines = Lines(0)
    while (line := lines.get(None)) is not None:
        if not line.strip():
            continue
        cfg = json.loads(line)
        os.environ["ABLATE_CACHE_DIR"] = cfg["cache_dir"]
        try:
            Judge(cfg, send, lines).run()
        except AblateError as e:
            send(kind="error", message=str(e))
        except Exception:
            send(kind="failure", message=traceback.format_exc()[-3000:])
            return 1  # state unknown: the supervisor starts a fresh judge next time
        finally:
            _release_memory()
    return 0


def _release_memory() -> None:
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
