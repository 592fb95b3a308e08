"""The judge's evidence from outside the candidate (ablate/evaluate/_shape.py, _exchange.py): outputs
read where the kernel wrote them, descriptions of them checked before any read, the time taken by
the judge, and the kernels that beat the candidate-side versions of these defences."""
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ablate.evaluate import _exchange
from ablate.evaluate._shape import Peer, ShapeJudge

KERNELS = Path(__file__).parent / "kernels"


# -- descriptions of memory, checked ----------------------------------------------------------------
def test_a_slot_holds_its_inputs_and_gives_them_back_in_place():
    x, w = torch.randn(8, 16).to(torch.bfloat16), torch.randn(16).to(torch.bfloat16)
    plan, nbytes = _exchange.plan_slot((x, w, 3))
    assert nbytes % _exchange.ALIGN == 0 and plan[2] == {"value": 3}
    slots = _exchange.Slots("cpu", 2, nbytes)
    try:
        views = slots.place(1, (x, w, 3), plan)
        assert torch.equal(views[0], x) and torch.equal(views[1], w) and views[2] == 3
        again = slots.views(1, plan)
        assert again[0].data_ptr() == views[0].data_ptr()  # in place: no copy between the judge and the kernel
        assert slots.entries(1, plan)[0]["offset"] == _exchange.HEADER + slots.slot_bytes
    finally:
        slots.close()


@pytest.mark.parametrize("entry,why", [
    ({"dtype": "float32", "shape": [4], "stride": [1], "offset": 60, "nbytes": 16}, "does not fit"),  # past the end
    ({"dtype": "float32", "shape": [4], "stride": [1], "offset": -4, "nbytes": 16}, "does not fit"),
    ({"dtype": "float32", "shape": [4], "stride": [1], "offset": 2, "nbytes": 16}, "does not fit"),  # misaligned
    ({"dtype": "float32", "shape": [4], "stride": [1], "offset": 0, "nbytes": 8}, "does not fit"),  # wrong size
    ({"dtype": "float32", "shape": [4], "stride": [-1], "offset": 0, "nbytes": 16}, "malformed"),
    ({"dtype": "float32", "shape": [4, 4], "stride": [1], "offset": 0, "nbytes": 64}, "malformed"),
    ({"dtype": "os.system", "shape": [4], "stride": [1], "offset": 0, "nbytes": 16}, "not a dtype"),
    ({"dtype": "float32", "shape": "4", "stride": [1], "offset": 0, "nbytes": 16}, "malformed"),
    ({"dtype": "float32"}, "malformed"),
])
def test_a_description_that_does_not_fit_its_memory_is_malformed(entry, why):
    raw = torch.zeros(64, dtype=torch.uint8)
    with pytest.raises(_exchange.Malformed, match=why):
        _exchange.view(raw, entry, 64)


def test_dense_layouts_are_permutations_of_contiguous_ones():
    assert _exchange.dense([4, 8], [8, 1]) and _exchange.dense([4, 8], [1, 4])  # row- and column-major
    assert not _exchange.dense([4, 8], [8, 2]) and not _exchange.dense([4, 8], [0, 1])  # gaps, broadcast


def _judge_of(segments, exp):
    sj = object.__new__(ShapeJudge)
    sj.torch, sj.segments, sj.exp = torch, segments, exp
    return sj


def test_outputs_are_read_from_the_judges_own_mapping_after_their_description_is_checked():
    segments = _exchange.Segments("cpu")
    fd = segments.add_cpu(256)
    try:
        raw = segments.maps[0][0]
        raw[:32].view(torch.float32).copy_(torch.arange(8, dtype=torch.float32))
        sj = _judge_of(segments, [([2, 4], "float32")])
        good = {"seg": 0, "offset": 0, "dtype": "float32", "shape": [2, 4], "stride": [4, 1], "nbytes": 32}
        out = sj.outputs({"entries": [good]})
        assert torch.equal(out[0], torch.arange(8, dtype=torch.float32).view(2, 4))
        raw[:32].fill_(0)  # what the peer writes afterwards does not change what was read: a copy
        assert torch.equal(out[0], torch.arange(8, dtype=torch.float32).view(2, 4))
        assert sj.outputs({"entries": [{**good, "shape": [4, 2], "stride": [2, 1]}]}) == {
            "wrong_shape": "output shape [4, 2], expected [2, 4]"}
        assert "wrong_dtype" in sj.outputs({"entries": [{**good, "dtype": "int32"}]})
        assert "output_not_dense" in sj.outputs({"entries": [{**good, "stride": [0, 1], "nbytes": 16}]})
        assert "wrong_shape" in sj.outputs({"entries": [good, good]})
        assert "wrong_shape" in sj.outputs({"entries": ["text"]})
        for forged in ({**good, "seg": 7}, {**good, "offset": 240}, {**good, "nbytes": 1 << 40}):
            with pytest.raises(_exchange.Malformed):
                sj.outputs({"entries": [forged]})
        with pytest.raises(_exchange.Malformed):
            sj.outputs({"entries": None})
        for ill_typed in ({**good, "stride": 5}, {**good, "shape": [2, 4], "stride": ["a", 1]}):
            with pytest.raises(_exchange.Malformed):  # never a TypeError, which no shape's row would keep
                sj.outputs({"entries": [ill_typed]})
    finally:
        import os

        os.close(fd)
        segments.close()


def test_a_report_for_another_batch_or_with_unmatched_descriptors_is_a_protocol_violation():
    from ablate.evaluate._shape import Gone

    sj = object.__new__(ShapeJudge)
    sj.device, sj.segments, sj.spent = "cuda", None, {"peer": 0.0}
    replies = iter([({"kind": "called", "batch": 3, "calls": []}, []),
                    ({"kind": "called", "batch": 1, "calls": [], "segments": [[1, 2 << 20]]}, [])])
    sj.peer = Peer(lambda *a, **k: None, lambda kinds, limit: next(replies), lambda: True)
    with pytest.raises(Gone, match="protocol: a report for batch 3"):
        sj.receive_called(1)
    with pytest.raises(Gone, match="protocol: 1 segments with 0 descriptors"):
        sj.receive_called(1)


def test_a_report_whose_calls_are_not_described_as_calls_is_a_protocol_violation():
    from ablate.evaluate._shape import Gone

    sj = object.__new__(ShapeJudge)
    sj.device, sj.segments, sj.spent = "cpu", None, {"peer": 0.0}
    sj.peer = Peer(lambda *a, **k: None, lambda kinds, limit: ({"kind": "called", "batch": 1, "calls": [{}, 7]}, []),
                   lambda: True)
    with pytest.raises(Gone, match="protocol: calls reported as"):
        sj.receive_called(1)


def test_a_timed_report_the_judge_cannot_read_rejects_its_shape_and_keeps_its_row(monkeypatch):
    """A timed batch's outputs described in fields of the wrong kind (a subverted driver's): the
    shape is a protocol_violation with its row, its checks and its error kept, as on a GPU; the
    judge's catch-all, which keeps no row, is never reached."""
    from ablate.evaluate import _shape

    class Described(ShapeJudge):  # every check passes; the timed batch's report is ill-typed
        def __init__(self, ev, i, shape, peer):
            self.flags, self.spent, self.device_kernels, self.exp = [], {"peer": 0.0}, [], [([2], "float32")]
            self.segments = _exchange.Segments("cpu")

        def open(self, count, sample):
            pass

        def check_set(self, ins, refs, env, fails, first):
            return SimpleNamespace(max_abs=0.0, margin=0.5, stats=[])

        def time_cpu(self, fails):
            return self.outputs({"entries": [{"shape": [2], "dtype": "float32", "stride": 5}]})

        def close(self):
            pass

    monkeypatch.setattr(_shape, "ShapeJudge", Described)
    ev = SimpleNamespace(plans=[{"sets": [("normal", 0)], "envelopes": {"normal": None},
                                "calibration": {"normal": {"envelope": None}}}],
                         row=lambda shape, base: {"shape_id": "M=2"}, candidate_peer=lambda: None, device="cpu",
                         input_set=lambda shape, k, references=True: ((torch.ones(2),), None, None),
                         cfg={"timing": True}, info={}, op=SimpleNamespace(bytes=lambda shape: 8))
    row, fails, ran = _shape.judge_shape(ev, 0, {"M": 2}, None)
    assert row["shape_id"] == "M=2" and row["fatal"] and row["max_abs_error"] == 0.0
    assert list(fails) == ["protocol_violation"] and "described as" in fails["protocol_violation"]
    assert "protocol_violation" in row["error"]


def test_a_run_report_for_another_batch_or_naming_kernels_oddly_is_a_protocol_violation():
    """A gated batch's second report ("ran", what the watch saw once the device ran it): for its
    own batch, and naming the device's kernels as [kernel, launching operator or null] pairs."""
    from ablate.evaluate._shape import Gone

    sj = object.__new__(ShapeJudge)
    sj.device, sj.segments, sj.spent, sj.device_kernels = "cuda", None, {"peer": 0.0, "ran": 0.0}, []
    replies = iter([({"kind": "ran", "batch": 2, "kernels": [["nvjet_tst", "aten::mm"], ["own", None]]}, []),
                    ({"kind": "ran", "batch": 1}, []),
                    ({"kind": "ran", "batch": 3, "kernels": [["k", 7]]}, []),
                    ({"kind": "ran", "batch": 3, "kernels": "nvjet_tst"}, [])])
    sj.peer = Peer(lambda *a, **k: None, lambda kinds, limit: next(replies), lambda: True)
    assert sj.receive_ran(2)["batch"] == 2
    assert sj.device_kernels == [("nvjet_tst", "aten::mm"), ("own", None)]
    assert sj.spent["ran"] > 0 and sj.spent["peer"] == 0  # its wait counted apart from the calls' reports
    with pytest.raises(Gone, match="protocol: a run reported for batch 1, expected 2"):
        sj.receive_ran(2)
    for _ in range(2):
        with pytest.raises(Gone, match="protocol: device kernels reported as"):
            sj.receive_ran(3)
    sj.peer = Peer(lambda *a, **k: None, lambda kinds, limit: None, lambda: False)
    with pytest.raises(Gone, match="did not report what ran"):
        sj.receive_ran(4)


def test_a_watch_that_lost_device_records_is_flagged_once():
    """A report whose watch missed its sentinel kernel in some session (watch_lost, a running count)
    flags the row `device_watch_incomplete`, once."""
    sj = object.__new__(ShapeJudge)
    sj.device, sj.segments, sj.spent, sj.device_kernels, sj.flags = "cuda", None, {"peer": 0.0, "ran": 0.0}, [], []
    replies = iter([({"kind": "ran", "batch": 1, "watch_lost": 0}, []), ({"kind": "ran", "batch": 2, "watch_lost": 1}, []),
                    ({"kind": "ran", "batch": 3, "watch_lost": 2}, [])])
    sj.peer = Peer(lambda *a, **k: None, lambda kinds, limit: next(replies), lambda: True)
    sj.receive_ran(1)
    assert sj.flags == []
    sj.receive_ran(2)
    sj.receive_ran(3)
    assert sj.flags == ["device_watch_incomplete"]


def test_a_batchs_drawn_calls_are_checked_before_the_watchs_report_and_that_report_is_always_read():
    """judge_batch checks the drawn calls while the peer's watch reads what the device ran, then
    reads that report ("ran") whatever the check found: a batch failed by its check must not leave
    the report unread (the next batch would read it as its own), nor drop the watch's findings."""
    sj = object.__new__(ShapeJudge)
    sj.device, sj.segments, sj.spent, sj.device_kernels = "cuda", None, {"peer": 0.0, "ran": 0.0}, []
    order = []

    def ran(kinds, limit):
        order.append("ran")
        return {"kind": "ran", "batch": 5, "failures": {"library_passthrough": "aten::rms_norm"}}, []

    sj.peer = Peer(lambda *a, **k: None, ran, lambda: True)
    calls = {"calls": [{"reason": None}] * 3, "failures": {}}
    for right in (True, False):
        def check(msg, staged, drawn, fails, snap=None, right=right):
            order.append("check")
            if not right:
                fails.setdefault("stale_output", "timed call 2: wrong")
            return right
        sj.check_timed, order[:] = check, []
        fails = {}
        assert sj.judge_batch(5, 3, calls, [None] * 3, [2], {2: ([1], [])}, fails) is right
        assert order == ["check", "ran"]
        assert "library_passthrough" in fails and ("stale_output" in fails) is not right


class _QueuingPeer:
    """A peer as the judge's channel shows it: each gated "call" answered by "called" then "ran", in
    order; a message of a kind the judge does not ask for is a protocol break (as in _link)."""

    def __init__(self):
        self.queue, self.log, self.broken = [], [], []

    def send(self, kind, fds=(), **msg):
        self.log.append(f"call {msg['batch']}")
        calls = [{"reason": None, "entries": []} for _ in msg["calls"]]
        self.queue += [{"kind": "called", "batch": msg["batch"], "calls": calls},
                       {"kind": "ran", "batch": msg["batch"]}]

    def receive(self, kinds, limit):
        msg = self.queue.pop(0)
        if msg["kind"] not in kinds:
            self.broken.append(f"{msg['kind']} {msg['batch']} read as {kinds}")
        self.log.append(f"{msg['kind']} {msg['batch']}")
        return msg, []


def _timing_judge(monkeypatch, wrong_batch=None):
    """A ShapeJudge whose device does nothing and whose every batch is clean: what is left is the
    order of its messages and checks."""
    from ablate.evaluate import _batches, _cuda

    monkeypatch.setattr(_cuda, "wait_value", lambda *a: None)
    monkeypatch.setattr(_batches, "batch_verdict", lambda words, n, fill, queued, queue_ns=None: (0.01 * n, None, 0.0))
    sj = object.__new__(ShapeJudge)
    event = SimpleNamespace(record=lambda: None, query=lambda: True)
    sj.torch = SimpleNamespace(Tensor=torch.Tensor, cuda=SimpleNamespace(synchronize=lambda: None, Event=lambda: event))
    sj.kernels = SimpleNamespace(stamp=lambda *a: None, witness=lambda *a: None, open=lambda *a: None)
    sj.words = SimpleNamespace(data_ptr=lambda: 0, cpu=lambda: SimpleNamespace(tolist=lambda: [0] * 40))
    sj.slots = SimpleNamespace(count=64, gate_ptr=0, marker_ptr=0, place=lambda j, ins, plan: [torch.zeros(1)])
    sj.device, sj.segments, sj.i, sj.entry_plan, sj.stream = "cuda", None, 0, None, None
    sj.spent = dict.fromkeys(("peer", "ran", "timed_checks", "device"), 0.0)
    sj.device_kernels, sj.voided, sj.draws_per_batch = [], [], 2
    sj.timed_inputs = lambda b, j: ([torch.zeros(1)], "normal")
    sj.call_msg = lambda ks: [{} for _ in ks]
    sj.outputs = lambda rep: [torch.zeros(1)]
    sj.peer = _QueuingPeer()
    checked = []

    def check(msg, staged, drawn, fails, snap=None):
        sj.peer.log.append(f"check {msg['batch']}")
        checked.append(msg["batch"])
        # a pending batch keeps the drawn calls' inputs only, not the whole batch's beside the next one's
        assert len(staged) == len(msg["calls"]) and all((x is None) == (j not in drawn) for j, x in enumerate(staged))
        if msg["batch"] == wrong_batch:
            fails.setdefault("stale_output", f"batch {wrong_batch}: wrong")
            return False
        return True
    sj.check_timed = check
    return sj, checked


def test_a_batch_is_judged_while_the_peer_queues_the_next_and_every_report_is_read_in_order(monkeypatch):
    """The drawn calls of batch b are checked after the call for batch b+1 is sent (the peer queues
    it meanwhile, behind the gate), then its "ran" read, then b+1's "called": the channel's order.
    The last batch is judged before the time is given; no report is left unread."""
    sj, checked = _timing_judge(monkeypatch)
    timing = sj.time_gpu({})
    assert timing is not None and sj.peer.broken == [] and sj.peer.queue == [] and sj.pending is None
    b = timing["batches"]
    assert checked == list(range(1, b + 1))  # every batch, the warm-up too
    log = sj.peer.log
    for k in range(2, b + 1):  # b-1 judged between b's call and b's report
        assert log.index(f"call {k}") < log.index(f"check {k - 1}") < log.index(f"ran {k - 1}") \
               < log.index(f"called {k}")
    assert log[-2:] == [f"check {b}", f"ran {b}"]


def test_a_batch_whose_check_fails_ends_the_timing_after_the_batch_queued_behind_it(monkeypatch):
    """A failed check is found while the next batch is queued: that batch still runs (its calls wait
    behind the gate) and is judged at once, so the timing ends with the failure and every report
    read, and no batch after it is asked for."""
    sj, checked = _timing_judge(monkeypatch, wrong_batch=3)
    fails = {}
    assert sj.time_gpu(fails) is None
    assert "stale_output" in fails and checked == [1, 2, 3, 4]
    assert sj.peer.broken == [] and sj.peer.queue == [] and sj.pending is None
    assert "call 5" not in sj.peer.log


# -- kernels, judged through the public API (the candidate-side version of each defence beaten) -------
@pytest.mark.parametrize("name,reasons", [
    # the H200 seal hook: the mode is refused and nothing it computes later reaches the judge
    ("seal_hook_mode", {"hook_active", "incorrect"}),
    # the same through torch.library: its clone over aten's (test below: it would have won)
    ("seal_hook_library", {"incorrect"}),
    # right where checked one by one, empty where timed: drawn timed calls are read right after their batch
    ("late_work", {"stale_output"}),
    # the library on a worker thread: the watch covers every thread
    ("passthrough_thread", {"library_passthrough"}),
    # the watch's profiler stopped around the library call and a fresh one started; recording
    # turned off around it: both accepted while torch's switches were the kernel's to call
    ("watch_stopped", {"library_passthrough", "driver_tampered"}),
    ("watch_blinded", {"library_passthrough", "driver_tampered"}),
    # the library redispatched: the dispatcher records no redispatch; accepted before evaluator 15
    ("passthrough_redispatch", {"library_passthrough"}),
    ("passthrough_kernel_function", {"library_passthrough"}),  # a kernel function for a key, called boxed
    ("passthrough_dispatch_key", {"library_passthrough"}),  # OpOverload._op_dk: accepted at evaluator 16
    ("passthrough_mirror", {"library_passthrough"}),  # a layer norm of [x, -x] is x's RMS norm
    # torch.compile drops record functions; inlining the check reads defaults refused to anyone:
    # which one stops it depends on how torch.compile takes the call
    ("passthrough_redispatch_compiled", {"library_passthrough", "forbidden_code"}),
])
def test_a_kernel_beating_the_candidate_side_defence_is_rejected(judged, name, reasons):
    r = judged(name, scan=False)
    assert r["verdict"] == "rejected", r["details"]
    if name == "passthrough_redispatch_compiled":
        assert reasons & set(r["reasons"]), r["details"]
    else:
        assert reasons <= set(r["reasons"]), r["details"]


def test_the_library_seal_hook_would_win_against_a_driver_that_copied_outputs_itself():
    """kernels/seal_hook_library.py's override works: a clone of what it returns, in its own process,
    is the right result, so only the judge reading the bytes the kernel left (and no tensor operation
    of that process) rejects it. In a process of its own: the override is aten's."""
    import subprocess
    import sys

    probe = f"""
import importlib.util, torch
spec = importlib.util.spec_from_file_location("k", {str(KERNELS / "seal_hook_library.py")!r})
k = importlib.util.module_from_spec(spec); spec.loader.exec_module(k)
x, w = torch.randn(8, 512, dtype=torch.bfloat16), torch.randn(512, dtype=torch.bfloat16)
right = k._rms(x, w)
y = k.kernel(x, w)
print(y.data_ptr() in k._pending, torch.equal(y.clone(), right))  # uncomputed when returned; right once cloned
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]


# another library kernel computing the contract on rearranged inputs (a mirror), accepted while each
# operator's library operators were its own names: every kernel of the family counts (_library_ops)
@pytest.mark.parametrize("op,name,scan", [
    ("gemm", "passthrough_conv", False),  # a width-1 convolution is a matrix product; the static scan passes it
    ("gemm", "passthrough_inplace", False),  # Tensor.addmm_ records aten::addmm_; the static scan passes it
    ("softmax", "passthrough_masked_softmax", False),  # nothing masked
    ("rmsnorm", "passthrough_batch_norm", False),  # a training-mode batch norm of [x, -x], x's rows as channels
    # NumPy's matmul dispatches no ATen operator: the watch cannot see it, the scan names it
    ("gemm", "passthrough_numpy", True),
])
def test_a_mirrored_library_kernel_is_a_passthrough(op, name, scan):
    from ablate.evaluate import evaluate

    r = evaluate(op, KERNELS / f"{name}.py", shapes="smoke", seed=7, draws=1, scan=scan)
    assert r["verdict"] == "rejected" and "library_passthrough" in r["reasons"], r["details"]


@pytest.mark.timeout(900)  # the compiled kernel's own limit (below), with room
@pytest.mark.parametrize("name,flag", [
    ("thread_pool", "threads_left_running"),  # a pool of the kernel's own, its workers idle between calls
    ("column_major", None),
    ("persistent_buffer", None),
    ("custom_op", None),
    ("compiled", None),  # torch.compile of its own code: Inductor's build, hashing and load probe are tools
    ("cuda_graph", None),  # a graph of its own on a GPU (test_gpu.py); here the file passes the scan and runs
])
def test_honest_kernels_of_the_kinds_agents_write_are_accepted(judged, name, flag):
    # Inductor's C++ build of the compiled one took over the default 60 s on two cores shared by
    # three test runs: a limit of its own, far above what it takes alone (nothing here is timed)
    r = judged(name, timeout_s=600) if name == "compiled" else judged(name)
    assert r["verdict"] == "accepted", r["details"]
    assert r["timing"] == "cpu-interpreted" and all(s["time_ms"]["median"] > 0 for s in r["shapes"])
    if flag:
        assert flag in r["shapes"][0]["flags"]


def test_a_call_reaches_no_other_calls_inputs_through_its_own(judged):
    """A batch's inputs are all in place before its gate opens: an input whose storage held the
    other slots would let a kernel run the batch as one launch (kernels/lookahead.py raises if so)."""
    r = judged("lookahead")
    assert r["verdict"] == "accepted", r["details"]


def test_a_batch_run_as_one_is_caught_on_a_cpu_and_its_call_by_call_twin_is_accepted(judged, tmp_path):
    """kernels/fused_batch.py runs a batch's calls as one launch decided on the device: on a GPU
    nothing detects it (docs/evaluator.md; `benchmarks/judge_clock.py fusion` measures what it
    gains). On a CPU each output is copied as its call returns, so the calls that launched nothing
    show their outputs unwritten. Its FUSE = False twin, what the GPU benchmark compares it with,
    is an honest kernel."""
    from ablate.evaluate import evaluate

    r = judged("fused_batch")
    assert r["verdict"] == "rejected" and r["reasons"] == ["stale_output"], r["details"]
    text = (KERNELS / "fused_batch.py").read_text()
    assert "\nFUSE = True\n" in text  # the line the benchmark turns off
    twin = tmp_path / "kernel.py"
    twin.write_text(text.replace("\nFUSE = True\n", "\nFUSE = False\n"))
    r = evaluate("rmsnorm", twin, shapes="smoke", seed=7)
    assert r["verdict"] == "accepted", r["details"]


def test_the_libraries_are_timed_by_the_same_protocol_in_a_process_of_their_own(judged):
    r = judged("honest_torch")
    s = r["shapes"][0]
    assert r["verdict"] == "accepted" and s["time_ms"]["batches"] == 1 and s["time_ms"]["n"] == 3
    assert set(s["baselines_ms"]) == {"torch_eager", "torch_F.rms_norm"}  # the CPU's libraries, each timed
    assert all(ms > 0 for ms in s["baselines_ms"].values())


def test_a_restriction_to_named_libraries_is_read_per_evaluation(kernels, monkeypatch):
    """The judge is a warm process started with its first caller's environment: a benchmark that
    names another library for its next evaluation must get that library timed, not the first's."""
    from ablate.evaluate import evaluate

    timed = []
    for only in ("torch_eager", "torch_F.rms_norm"):
        monkeypatch.setenv("ABLATE_EVAL_BASELINES", only)
        r = evaluate("rmsnorm", kernels / "honest_torch.py", shapes="smoke", seed=7)
        timed.append(set(r["shapes"][0]["baselines_ms"]))
    assert timed == [{"torch_eager"}, {"torch_F.rms_norm"}]


def test_a_library_the_operator_does_not_have_is_one_line_naming_those_it_has(kernels, monkeypatch):
    from ablate.errors import AblateError
    from ablate.evaluate import evaluate

    monkeypatch.setenv("ABLATE_EVAL_BASELINES", "torch_F.rms_norm,quack_rmsnorm_typo")
    one_line = r"names quack_rmsnorm_typo, not a library of rmsnorm; its libraries: .*torch_eager"
    with pytest.raises(AblateError, match=one_line):
        evaluate("rmsnorm", kernels / "honest_torch.py", shapes="smoke", seed=7)
    monkeypatch.delenv("ABLATE_EVAL_BASELINES")
    assert evaluate("rmsnorm", kernels / "honest_torch.py", shapes="smoke", seed=7)["verdict"] == "accepted"


def test_a_judge_never_imports_what_it_judges_nor_does_its_library_process(judged):
    r = judged("honest_torch")
    assert r["evaluator_version"] == "22"
    assert "hook_active" in r["checks"] and r["checks"]["hook_active"] == "pass"


def _words(window_ns=8_000_000, fill_ns=100_000, gap_at=None):
    w = [0] * 64
    w[0], w[1], w[2], w[3] = 10, 10 + fill_ns, 20_000_000, 20_000_000 + window_ns
    if gap_at is not None:
        w[gap_at + 2], w[gap_at + 3], w[gap_at + 4] = 2_400_000, 1, 2_400_000  # longest, count, total
    return w


def test_a_clean_batch_counts_its_window_over_its_calls():
    from ablate.evaluate._batches import batch_verdict

    window, why, fill = batch_verdict(_words(), 10, None, queued=True)
    assert (window, why, fill) == (8.0, None, 10_000)


@pytest.mark.parametrize("at,where", [(16, "before the start"), (24, "after the end"), (32, "after the check")])
def test_a_batch_is_void_when_a_witness_saw_another_context(at, where):
    """Work started on the inputs before the gate opened, or left running past the marker, took a
    time slice from the judge's witness: the batch does not count."""
    from ablate.evaluate._batches import batch_verdict

    _, why, _ = batch_verdict(_words(gap_at=at), 10, 10_000, queued=True)
    assert why and where in why and "2400 us" in why


def test_a_batch_is_void_when_its_inputs_took_far_longer_to_copy_in_than_at_first():
    """Another context running while the judge copied the inputs in: precomputation would hide there."""
    from ablate.evaluate._batches import FILL_SLACK, batch_verdict

    assert batch_verdict(_words(fill_ns=120_000), 10, 10_000, queued=True)[1] is None  # within the slack
    slow = int(10 * (10_000 * FILL_SLACK + 10_000))
    assert "to copy in" in batch_verdict(_words(fill_ns=slow), 10, 10_000, queued=True)[1]
    # the void line says too what the witness right after the copy-in saw: another context's slice or none
    assert batch_verdict(_words(fill_ns=slow, gap_at=16), 10, 10_000, queued=True)[1].endswith(
        "the witness before the start saw 2400 us of gaps")


def test_a_batch_whose_calls_were_not_queued_before_the_gate_is_void():
    from ablate.evaluate._batches import batch_verdict

    assert "not all queued" in batch_verdict(_words(), 10, 10_000, queued=False)[1]


def _batch_words(window_ms: float, n: int, void: bool = False) -> tuple[list[int], bool]:
    """What GpuTiming.run_batch hands back for a clean batch of n calls (or one a witness voided)."""
    return _words(window_ns=round(window_ms * 1e6), fill_ns=10_000 * n, gap_at=16 if void else None), True


class _Batches:
    """GpuTiming over a stand-in device: a batch of n calls takes n * call_ms + protocol_ms. Only
    the device's part (run_batch) is stood in for: gpu_batch's own bookkeeping runs as on a GPU."""

    def __new__(cls, call_ms, protocol_ms, void_every=0):
        from ablate.evaluate._batches import GpuTiming

        class Fake(GpuTiming):
            def run_batch(self, b, n, fails, est_ms):
                self.sizes.append(n)
                return _batch_words(n * call_ms + protocol_ms, n, void=bool(void_every and b % void_every == 0))

        t = Fake()
        t.slots, t.voided, t.sizes = SimpleNamespace(count=64), [], []
        return t


def test_the_protocols_own_cost_is_taken_off_every_batch():
    """The gate's opening and the marker's handover cost a batch a fixed time (0.35 ms on an H200),
    whatever its calls: left in, it would add 0.35 / n ms to each call, so two kernels timed in
    batches of different sizes would get different shares of it and their ratio would be wrong."""
    with_cost = _Batches(0.05, 0.35).time_gpu({}, protocol_ms=0.35)
    assert with_cost["median"] == pytest.approx(0.05) and with_cost["protocol_ms"] == 0.35
    assert with_cost["wall_ms"] == pytest.approx(0.05 + 0.35 / with_cost["calls_per_batch"], rel=0.01)
    left_in = _Batches(0.05, 0.35).time_gpu({}, protocol_ms=0.0)
    assert left_in["median"] > 1.1 * 0.05


def test_the_first_batch_sizes_the_rest_from_its_calls_alone():
    t = _Batches(0.05, 0.35)
    t.time_gpu({}, protocol_ms=0.35)
    assert t.sizes[0] == 2  # then 8 ms of 0.05 ms calls: as many as the slots hold, less up to a quarter
    assert all(48 <= n <= 64 for n in t.sizes[1:]) and len(set(t.sizes[1:])) > 1


def test_the_wall_time_is_the_median_of_the_batches_windows_in_whatever_order_they_came(monkeypatch):
    """Twenty counted batches, two slow ones in the middle of their order: the median is a fast one."""
    from ablate.evaluate import _batches

    monkeypatch.setattr(_batches, "batch_length", lambda most: most)
    monkeypatch.setattr(_batches, "MAX_BATCHES", 21)  # the sizing batch, then twenty counted
    monkeypatch.setattr(_batches, "BUDGET_MS", 1e9)
    extra = iter([0.0] + [0.0] * 9 + [6.4, 6.4] + [0.0] * 9)

    class Uneven(_Batches.__new__(_Batches, 0.05, 0.0).__class__):
        def run_batch(self, b, n, fails, est_ms):
            return _batch_words(n * 0.05 + next(extra), n)

    t = Uneven()
    t.slots, t.voided, t.sizes = SimpleNamespace(count=64), [], []
    got = t.time_gpu({}, protocol_ms=0.0)
    assert got["n"] == 20 and got["wall_ms"] == pytest.approx(0.05)


def test_a_batch_not_queued_in_time_shrinks_the_next_and_its_void_line_says_so():
    """A kernel of several launches a call can outrun the device's launch queue behind the gate: the
    judge opens the gate without the peer's report, voids the batch, and queues a quarter as many
    calls next. The void line names the batch's size and that it was not queued, whatever check
    voided it first (a slow copy-in is checked before the queue), so a row says which it was."""
    class Overflowing(_Batches.__new__(_Batches, 0.05, 0.0).__class__):
        def run_batch(self, b, n, fails, est_ms):
            self.sizes.append(n)
            self.queue_ns = 4_000  # the judge's host queued the copies in 4 us a call: the device was slow
            if n > 16:  # the queue holds 16 calls' launches: copied in slowly, and not all queued
                return _words(window_ns=round(n * 0.05e6), fill_ns=10_000 * n * 5), False
            return _batch_words(n * 0.05, n)

    t = Overflowing()
    t.slots, t.voided, t.sizes = SimpleNamespace(count=64), [], []
    got = t.time_gpu({}, protocol_ms=0.0)
    assert got is not None and got["median"] == pytest.approx(0.05)
    first = t.sizes[1]
    assert first > 16 and t.voided[0].startswith(f"batch 2: {first} calls: the inputs took")
    assert t.voided[0].endswith("10.0 us the first time; the witness before the start saw 0 us of gaps; "
                                "the judge's host queued the copies in 4.0 us a call; its calls were not all queued in time")
    assert t.sizes[2] <= first // 4 and all(n <= 16 for n in t.sizes[2:])
    # the row says how near the yardstick every batch's copy-in ran, the void one's too, and how long
    # the judge's host took to queue the copies (us a call): a copy-in far above that waited on the device
    assert got["copy_in_us"] == {"first": 10.0, "median": 10.0, "max": 50.0, "host_median": 4.0}
    assert _Batches(0.05, 0.0).time_gpu({})["copy_in_us"] == {"first": 10.0, "median": 10.0, "max": 10.0}


def test_a_batchs_length_is_drawn_so_no_call_knows_it_ends_the_batch():
    from ablate.evaluate._batches import batch_length

    for most in (2, 3, 5, 37):
        seen = {batch_length(most) for _ in range(400)}
        assert len(seen) > 1 and max(seen) == most and min(seen) == most - max(1, most // 4), (most, seen)
    assert batch_length(1) == 1


def test_the_last_call_of_every_checked_batch_is_checked_and_the_others_are_distinct():
    sj = SimpleNamespace(draws_per_batch=3)
    for n in (1, 2, 3, 10, 40):
        for _ in range(200):
            drawn = ShapeJudge.draw(sj, n)
            assert drawn[0] == n - 1 and len(drawn) == min(3, n) == len(set(drawn)), (n, drawn)
            assert all(0 <= j < n for j in drawn)
    seen = {j for _ in range(400) for j in ShapeJudge.draw(sj, 10)[1:]}
    assert seen == set(range(9))  # every other call can be drawn
    assert ShapeJudge.draw(SimpleNamespace(draws_per_batch=0), 40) == []  # the protocol's plain copy


class _Deferring(_Batches.__new__(_Batches, 0.05, 0.35).__class__):
    """kernels/deferred.py on the stand-in device: from its second timed batch on, each call's work
    is left to the call it expects to end the batch (the last batch's length, and every multiple
    of it); calls after the last such call are never written."""

    learned = None
    draw, draws_per_batch = ShapeJudge.draw, 3

    def run_batch(self, b, n, fails, est_ms):
        written = n if self.learned is None else n // self.learned * self.learned
        if n > 2:
            self.learned = n
        if any(j >= written for j in self.draw(n)):
            fails.setdefault("stale_output", "timed call: unwritten")
            return None
        return super().run_batch(b, n, fails, est_ms)


def test_work_left_to_the_call_expected_to_end_a_batch_is_caught(monkeypatch):
    """Against batches of one length the deferring kernel is right every time; against lengths the
    judge draws per batch, with the last call checked, it is caught in every shape."""
    from ablate.evaluate import _batches

    def shape(deferring):
        deferring.slots, deferring.voided, deferring.sizes = SimpleNamespace(count=64), [], []
        fails = {}
        return deferring.time_gpu(fails, protocol_ms=0.35), fails

    for _ in range(50):
        timing, fails = shape(_Deferring())
        assert timing is None and "stale_output" in fails
    monkeypatch.setattr(_batches, "batch_length", lambda most: most)  # the protocol before: one length
    for _ in range(5):
        timing, fails = shape(_Deferring())
        assert timing is not None and not fails


def test_a_window_shorter_than_the_protocols_cost_is_no_time_at_all():
    """Nothing left after the protocol's cost: a time of zero, which every physical floor rejects."""
    got = _Batches(0.0, 0.1).time_gpu({}, protocol_ms=0.35)
    assert got["median"] == 0.0


def test_the_protocols_cost_is_what_a_batch_of_no_call_would_take():
    """From batches of one call and of PROTOCOL_CALLS calls (void ones left out), the window's
    intercept: the cost every batch carries whatever its calls."""
    from ablate.evaluate._batches import PROTOCOL_CALLS, PROTOCOL_ROUNDS

    t = _Batches(0.06, 0.35, void_every=3)
    assert t.protocol_cost() == pytest.approx(0.35)
    assert sorted(set(t.sizes)) == [1, PROTOCOL_CALLS] and len(t.sizes) == 2 * PROTOCOL_ROUNDS
    assert _Batches(0.06, 0.35, void_every=1).protocol_cost() is None  # never clean: not guessed


def test_the_library_process_runs_the_plain_copy_the_protocols_cost_is_measured_with():
    from ablate.evaluate._library import PLAIN_COPY, Library, plain_copy

    x = torch.randn(3, 4)
    y = plain_copy(2, x, torch.randn(4))
    assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()
    lib = Library("cpu")
    try:
        lib.use("rmsnorm", None, PLAIN_COPY)
        assert lib.using == ("rmsnorm", "null", PLAIN_COPY)
        with pytest.raises(RuntimeError, match="no_such_library"):
            lib.use("rmsnorm", None, "no_such_library")
    finally:
        lib.close()


def test_the_library_process_is_kept_across_evaluations_and_switched_by_operator_too():
    """One interpreter for the judge's life (a fresh one cost every evaluation about 1.3 s on a
    CPU); two operators' libraries may share a name, so the operator picks the function too, and
    a failure ends the process rather than leave it in an unknown state."""
    from ablate.evaluate import _link

    link = SimpleNamespace(device="cpu")
    lib = _link.CandidateLink.library(link)
    try:
        assert _link.CandidateLink.library(link) is lib
        sent = []
        send = lib.ch.send
        lib.ch.send = lambda kind, **kw: (sent.append((kind, kw.get("operator"))), send(kind, **kw))[1]
        lib.use("rmsnorm", None, "torch_eager")
        lib.use("rmsnorm", None, "torch_eager")  # already running it: nothing sent
        lib.use("softmax", None, "torch_eager")  # same name, another operator's function
        assert sent == [("library", "rmsnorm"), ("library", "softmax")]
        _link.discard_library("cpu")
        assert lib.proc.poll() is not None
        again = _link.CandidateLink.library(link)
        assert again is not lib and again.proc.poll() is None
    finally:
        _link.discard_library("cpu")


@pytest.mark.parametrize("fitted, taken_off, flag", [(0.35, 0.35, None), (-0.01, 0.0, None),
                                                    (5.0, 0.0, "protocol_cost_implausible"),
                                                    (-1.0, 0.0, "protocol_cost_implausible"),
                                                    (None, 0.0, "protocol_cost_unmeasured")])
def test_a_protocol_cost_outside_its_physical_range_is_said_not_taken_off_nor_cached(
        monkeypatch, tmp_path, fitted, taken_off, flag):
    """A cost fitted wrong would bias every time on that GPU until the cache is cleared; too large,
    it pushes a fast kernel's time toward zero. Outside PROTOCOL_RANGE_MS it is said and dropped."""
    from ablate.evaluate import _baselines, _cache
    from ablate.evaluate._shape import ShapeJudge

    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ShapeJudge, "open", lambda self, count, sample: None)
    monkeypatch.setattr(ShapeJudge, "close", lambda self: None)
    monkeypatch.setattr(ShapeJudge, "protocol_cost", lambda self: fitted)
    shape = {"M": 8, "N": 8}
    lib = SimpleNamespace(use=lambda *a: None, peer=lambda: None)
    notes = []
    ev = SimpleNamespace(device="cuda", torch=torch, shapes=[shape], plans=[{}], cfg={}, ceilings={"id": "c"},
                         info={"name": "gpu", "driver": 1}, libs={}, op=SimpleNamespace(name="rmsnorm"), op_hash="h",
                         flags=[], note=notes.append, library=lambda: lib,
                         input_set=lambda shape, k, references: ((torch.ones(2),), None, None))
    assert _baselines.protocol_ms(ev, shape) == taken_off
    assert ev.flags == ([flag] if flag else [])
    assert bool(_cache.get("protocol", _baselines._key(ev, "M=8,N=8", "c", "v1")) is not None) == (flag is None)
    if flag == "protocol_cost_implausible":
        assert "not taken off" in notes[0]


def test_the_protocols_cost_is_nothing_on_a_cpu():
    from ablate.evaluate import _baselines

    assert _baselines.protocol_ms(SimpleNamespace(device="cpu"), {"M": 1}) == 0.0


def _cpu_judge(**parts):
    """A ShapeJudge for time_cpu with stand-ins: a peer that answers at once, eight slots, fresh
    inputs named (batch, call); `parts` replaces any of them (send for the peer's)."""
    sj = object.__new__(ShapeJudge)
    sj.i, sj.entry_plan, sj.torch = 0, None, torch
    sj.slots = SimpleNamespace(count=8)
    sj.batch_slots = lambda count: SimpleNamespace(place=lambda *a: None, views=lambda j, plan: [], nbytes=0,
                                                   take_fd=lambda: os.open(os.devnull, os.O_RDONLY), close=lambda: None)
    sj.peer = SimpleNamespace(send=parts.pop("send", lambda *a, **k: None))
    sj.timed_inputs = lambda b, j: ((b, j), "timed")
    sj.call_msg = lambda ks, slots=None: [{} for _ in ks]
    sj.receive_called = lambda b: {"batch": b, "calls": []}
    sj.failures_of = lambda msg, fails, prefix: None
    for name, part in parts.items():
        setattr(sj, name, part)
    return sj


def test_on_a_cpu_each_calls_inputs_come_with_its_message_never_into_memory_the_peer_had():
    """On a CPU the peer maps the judge's memory: an input placed in slots it had mapped could be
    read, and a timed call computed, by a thread of the kernel's before the judge's clock starts
    (kernels/ahead_of_the_clock.py). Each call message brings its inputs in slots of their own,
    which the peer maps when the message comes; the shape's slots are never written."""
    import mmap
    from collections import defaultdict

    from ablate.evaluate._shape import CPU_CALLS

    x, w = torch.randn(4, 8).to(torch.bfloat16), torch.randn(8).to(torch.bfloat16)
    plan, nbytes = _exchange.plan_slot((x, w))
    sj = object.__new__(ShapeJudge)
    sj.i, sj.device, sj.torch, sj.entry_plan, sj.spent = 0, "cpu", torch, plan, defaultdict(float)
    sj.slots, sj.out_plan, sj.out_slot = _exchange.Slots("cpu", 8, nbytes), [64], 256
    sent = []

    def send(kind, fds=(), **msg):  # the stand-in peer maps what came with the message, as the driver does
        assert kind == "call" and len(fds) == 1
        sent.append((msg, torch.frombuffer(mmap.mmap(fds[0], msg["nbytes"]), dtype=torch.uint8).clone()))

    sj.peer, sj.receive_called, sj.failures_of = SimpleNamespace(send=send), lambda b: {"calls": []}, lambda *a: None
    ShapeJudge.call_once(sj, (x, w), check=True, first=True)  # a checked set
    sj.timed_inputs = lambda b, j: ((torch.full((4, 8), 10.0 * b + j).to(torch.bfloat16), w), "timed")
    sj.copy_out = lambda msg, drawn, views: {j: (None, [v.clone() for v in views[j]]) for j in drawn}
    snaps = []
    sj.check_timed = lambda msg, staged, drawn, fails, snap: snaps.append(snap) or True
    ShapeJudge.time_cpu(sj, {})
    try:
        assert not sj.slots.raw.any()  # the memory the peer had mapped since the shape began: never written
        assert [len(m["calls"]) for m, _ in sent] == [1, 1, CPU_CALLS]
        expected = [(x, w), (torch.full((4, 8), 10.0).to(torch.bfloat16), w)] + [
            (torch.full((4, 8), 20.0 + j).to(torch.bfloat16), w) for j in range(CPU_CALLS)]
        got = [tuple(_exchange.view(raw, e, m["nbytes"]) for e in c["inputs"]) for m, raw in sent for c in m["calls"]]
        assert all(torch.equal(a, b) for g, e in zip(got, expected) for a, b in zip(g, e)) and len(got) == len(expected)
        assert torch.equal(snaps[-1][2][1][0], expected[-1][0])  # the judge's own view of what the call was given
    finally:
        sj.slots.close()


def test_no_input_is_readable_by_the_kernel_before_its_call_is_sent(judged):
    """kernels/ahead_of_the_clock.py: a thread watching every input the kernel was handed finds
    none of a later call's inputs there. Until 2026-12-08 every call's inputs were placed in the
    shape's slots, which the kernel keeps mapped, and it was rejected (it raised) at its second
    checked set; a timed batch's first call could be computed before the clock started."""
    r = judged("ahead_of_the_clock")
    assert r["verdict"] == "accepted", r["details"]


def test_a_cpu_timing_leaves_out_a_first_call_on_the_shape(monkeypatch):
    """On a CPU a library's first call on a shape (its process checks nothing before timing) took
    up to twice a warm call's time, which a candidate warm from its checked calls gained as
    speedup: the judge's clock starts after one untimed call, for any peer alike."""
    from ablate.evaluate import _shape

    clock, sent = [0.0], []

    def send(kind, batch, calls, **_):  # the stand-in peer: its first call takes a second, the rest 1 ms
        sent.append((batch, len(calls)))
        clock[0] += sum(1.0 if len(sent) == 1 and k == 0 else 0.001 for k in range(len(calls)))

    monkeypatch.setattr(_shape.time, "perf_counter", lambda: clock[0])
    checked = []
    sj = _cpu_judge(send=send, copy_out=lambda msg, drawn, views: {},
                    check_timed=lambda msg, staged, drawn, fails, snap: checked.append([i for i, _ in staged]) or True)
    got = ShapeJudge.time_cpu(sj, {})
    assert sent == [(1, 1), (2, _shape.CPU_CALLS)]
    assert got["median"] == pytest.approx(1.0) and got["n"] == _shape.CPU_CALLS  # ms a call, the cold one left out
    assert checked == [[(1, 0)], [(2, j) for j in range(_shape.CPU_CALLS)]]  # every call's outputs checked, fresh inputs


def test_a_cpu_timings_window_closes_once_the_outputs_are_copied_out(monkeypatch):
    """On a CPU the outputs the judge reads are in memory the kernel shares: until the judge's copy,
    a thread of the kernel's can still write them after its calls reported done. The window closes
    after the copy, so what the copy holds was written inside the time judged."""
    from ablate.evaluate import _shape

    clock = [0.0]

    def send(kind, batch, calls, **_):  # the stand-in peer: every call reported done after 1 ms
        clock[0] += 0.001 * len(calls)

    def copy_out(msg, drawn, views):  # the judge's copy: what a kernel's thread wrote until now is in it
        clock[0] += 0.016
        return {}

    monkeypatch.setattr(_shape.time, "perf_counter", lambda: clock[0])
    sj = _cpu_judge(send=send, copy_out=copy_out, check_timed=lambda msg, staged, drawn, fails, snap: True)
    got = ShapeJudge.time_cpu(sj, {})
    assert got["median"] == pytest.approx(1.0 + 16.0 / _shape.CPU_CALLS)  # 1.0 when the window closed at the report


def test_a_cpu_timing_copies_every_calls_outputs_out_before_judging_any(monkeypatch):
    """A kernel whose timed calls return at once, a thread of its own writing their outputs while
    the judge checks the first call's (kernels/worker_ahead.py), would be timed at the speed of
    returning if each output were read only when its turn came: every call's outputs are copied
    out as the batch is reported, before any is judged, and read as the kernel left them then."""
    import contextlib

    from ablate.evaluate import _shape

    memory = {}  # (batch, call) -> what the kernel has written there

    def receive_called(b):  # each batch's first call computed in the call; the others left to the thread
        memory.update({(b, j): "right" if j == 0 else "unwritten" for j in range(_shape.CPU_CALLS)})
        return {"batch": b, "calls": [{"at": (b, j)} for j in range(1 if b == 1 else _shape.CPU_CALLS)]}

    def reference_outputs(op, ins):  # the judge at work on a call: meanwhile the thread writes every output
        memory.update(dict.fromkeys(memory, "right"))
        return ins

    monkeypatch.setattr(_shape._correctness, "reference_outputs", reference_outputs)
    monkeypatch.setattr(_shape._correctness, "judge_own_input",
                        lambda op, outs, refs, ins, env: {} if outs == ["right"] else {"incorrect": f"{outs}"})
    sj = _cpu_judge(receive_called=receive_called, outputs=lambda rep: [memory[rep["at"]]],
                    spending=lambda name: contextlib.nullcontext(), ev=SimpleNamespace(op=None),
                    plan={"envelopes": {"timed": None}})
    fails: dict = {}
    assert ShapeJudge.time_cpu(sj, fails) is None
    assert fails == {"stale_output": "timed call 1: ['unwritten']"}


def test_a_kernel_wrong_on_one_input_set_alone_is_named_by_that_set(tmp_path):
    """A kernel wrong on its fifth call alone is rejected for the fifth input set, named by its own
    distribution and draw."""
    from ablate.evaluate import evaluate
    from ablate.evaluate._judge import input_sets

    kernel = tmp_path / "kernel.py"
    kernel.write_text((KERNELS / "honest_torch.py").read_text() + """
CALLS = [0]
_right = kernel


def kernel(x, weight):
    CALLS[0] += 1
    out = _right(x, weight)
    return out * 2 if CALLS[0] == 5 else out
""")
    r = evaluate("rmsnorm", kernel, shapes="smoke", seed=7)
    dist, d = input_sets(3)[4]
    assert r["verdict"] == "rejected" and r["reasons"] == ["incorrect"], r["details"]
    assert f"{dist} draw {d}:" in r["details"]["incorrect"] and r["shapes"][0]["correct"] is False


def test_the_witness_is_longer_than_two_time_slices_as_measured():
    import json
    from pathlib import Path

    from ablate.evaluate import _batches as _shape

    measured = json.loads((Path(__file__).parents[3] / "benchmarks" / "results" / "h200-judge-clock" /
                           "primitives.json").read_text())["slices"]
    slice_ns = measured["beside_spin"]["longest_gap_ns"]
    assert _shape.WITNESS_NS >= 2 * slice_ns and measured["alone_50ms"]["longest_gap_ns"] < _shape.GAP_NS
    assert measured["beside_wait"]["gaps"] == 0  # a stream waiting on the gate takes no slice


def _driver_over_two_slots(fn):
    """A CPU Driver (no process around it) whose slots hold two input sets of RMSNorm's, and the
    entries of the first."""
    import mmap

    from ablate.evaluate._candidate import Driver

    x, w = torch.randn(4, 8).to(torch.bfloat16), torch.randn(8).to(torch.bfloat16)
    plan, slot_bytes = _exchange.plan_slot((x, w))
    nbytes = _exchange.HEADER + 2 * slot_bytes
    slots, outs = mmap.mmap(-1, nbytes), mmap.mmap(-1, 4096)
    d = Driver.__new__(Driver)
    d.torch, d.device, d.pool, d.signature_checked, d.held, d.native_base, d.fn = torch, "cpu", None, None, [], None, fn
    d.as_tensor, d.frombuffer = torch.as_tensor, torch.frombuffer
    d.slots = {"raw": torch.frombuffer(slots, dtype=torch.uint8), "size": nbytes, "maps": (slots, outs),
               "out_raw": torch.frombuffer(outs, dtype=torch.uint8)}
    entries = [{**e, "offset": _exchange.HEADER + e["offset"]} for e in plan]
    return d, entries, _exchange.HEADER + slot_bytes


def test_each_input_a_call_gets_is_a_storage_of_its_own_bytes():
    d, entries, _ = _driver_over_two_slots(None)
    for t, e in zip(d.inputs_of(entries), entries):
        assert t.untyped_storage().nbytes() == e["nbytes"] == t.numel() * t.element_size()


def test_an_output_in_the_slots_memory_aliases_an_input_even_outside_the_calls_own():
    """Each input's storage is its own bytes now; the alias check still covers every slot."""
    holder = {}

    def in_next_slot(x, w):  # the next call's slot, its storage those bytes alone (as a raw address gives)
        mem = holder["d"].slots["maps"][0]
        return torch.frombuffer(mem, dtype=torch.uint8, count=64, offset=holder["next"]).view(torch.bfloat16).view(4, 8)

    d, entries, holder["next"] = _driver_over_two_slots(in_next_slot)
    holder["d"] = d
    rep = d.one(0, entries, [{"offset": 0, "nbytes": 64}], first=True, check=False)
    assert "output_aliases_input" in rep["failures"]
    d.fn = lambda x, w: (x.float() * 2).to(x.dtype)  # fresh memory: no alias
    assert "output_aliases_input" not in d.one(0, entries, [{"offset": 0, "nbytes": 64}], first=True, check=False)["failures"]
