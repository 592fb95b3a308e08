"""What the candidate's driver watches in its own process, beside the judge's evidence: the ATen
operators a batch dispatched on any thread (a library passthrough), the kernels the device ran
for it (on a GPU: one of a library's own kernels, replayed from a CUDA graph or reached past
torch, is a library passthrough too), and a torch dispatch or function mode the kernel left in
force (taken out of force before the driver's own tensor operations, and reported)."""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field

from ablate.operators._library_ops import kernel_stem, recorded_names, vendor_kernels

# torch's switches of its profiler and of the record functions it is fed by: a kernel that could
# call them would stop the watch, restart it empty or turn recording off around a library call. In
# a candidate they are the driver's alone (seal_switches); the first three are what the watch runs on.
SWITCHES = ("_prepare_profiler", "_enable_profiler", "_disable_profiler", "_enable_record_function",
            "_clear_callbacks", "_enable_profiler_legacy", "_disable_profiler_legacy", "_set_empty_test_observer",
            "_toggle_collection_dynamic")
TAMPERED = "the operator watch was stopped, restarted or blinded during the batch"
KERNELS_PER_REPORT = 64  # device kernels first seen, named in one report (the rest in the next)
# Each session of torch's profiler registers CUPTI's timestamp callback again, and some CUPTI versions
# then corrupt the timestamps of a session's first kernel records, more as the process goes on
# (pytorch/pytorch#192021: one more each registration, and more with the device's idle time); the
# profiler drops them as outside its window. A device watch therefore opens each session with fills
# of its own (PADDING_FILL's), then a sentinel kernel (SENTINEL's). The fills are sized by the loss
# the process last saw (next_padding): a session that did not record the driver's sentinel lost
# records past the padding, and says so.
SENTINEL = "aten::bitwise_not"
PADDING_FILL = "aten::fill"
PADDING_MIN, PADDING_MAX = 8, 2048
_padding = [PADDING_MIN]  # fills the next device session of this process opens with, any watch's


@dataclass
class Sealed:
    """What the driver's watch holds once torch's switches are sealed: the real switches (by name),
    the library operators the checked entries refuse (filled by the watch) and those they refused
    (read by the watch)."""

    switches: dict
    refused: set = field(default_factory=set)
    redispatched: list = field(default_factory=list)


def seal_switches(torch) -> Sealed:
    """torch's profiler switches (SWITCHES), for the driver's watch alone: every name a loaded
    module has for one, torch._C._autograd's own included (what a later import copies), is rebound
    to a function that refuses; and a watched operator run past the dispatcher's record function is
    refused and noted (_checked_entry and _checked_for_key, into the Sealed's containers). Before
    the submission is imported; the Sealed returned is held by the driver's watch, which no name a
    kernel can look up leads to."""
    C = torch._C._autograd
    real = Sealed({n: getattr(C, n) for n in SWITCHES if hasattr(C, n)})
    _rebind([C], {id(f): (f, _refused(n)) for n, f in real.switches.items()})
    # the dispatcher's entries that run an operator's kernel without a record function
    entries = [(torch._C._DispatchOperatorHandle, "redispatch_boxed", lambda h: h),  # OpOverload.redispatch
               (getattr(torch._C, "_SafeKernelFunction", None), "call_boxed", lambda k: k.op_handle)]
    for cls, attr, handle_of in entries:
        if cls is not None and hasattr(cls, attr):
            setattr(cls, attr, _checked_entry(getattr(cls, attr), handle_of, real.refused, real.redispatched))
            SEALED.append(getattr(cls, attr))
    _seal_for_key(torch, real.refused, real.redispatched)
    return real


def _rebind(first: list, replacements: dict) -> None:
    """Every name a loaded module (and each of `first`) has for a function in `replacements`
    ({id: (function, replacement)}) rebound to its replacement."""
    module = type(sys)
    for mod in [*first, *list(sys.modules.values())]:
        if not isinstance(mod, module):
            continue
        ns = vars(mod)
        for key, value in list(ns.items()):
            pair = replacements.get(id(value))
            if pair is not None and value is pair[0]:
                ns[key] = pair[1]


def _seal_for_key(torch, refused: set, redispatched: list) -> None:
    """An operator's kernel for a dispatch key (OpOverload._op_dk, the second item of
    torch._C._get_operation_overload: what torch's Python dispatcher calls) runs with no record
    function either. Every such entry made so far, and every one made later, becomes a partial of
    one checked function (_checked_for_key) that holds the real ones in a table among its defaults."""
    import functools

    ops = torch._ops
    for_key, reals = _checked_for_key(refused, redispatched)
    for ns in list(vars(torch.ops).values()):
        if not isinstance(ns, ops._OpNamespace):
            continue
        for packet in list(vars(ns).values()):
            if not isinstance(packet, ops.OpOverloadPacket):
                continue
            for overload in list(vars(packet).values()):
                if isinstance(overload, ops.OpOverload):
                    key = (overload._schema.name, overload._schema.overload_name)
                    reals[key] = overload._op_dk
                    overload._op_dk = functools.partial(for_key, key)

    def get_operation_overload(name, overload, *args, _real=torch._C._get_operation_overload, _reals=reals,
                               _for_key=for_key, _partial=functools.partial, **kwargs):
        found = _real(name, overload, *args, **kwargs)
        if found is None:
            return found
        op, op_dk, *rest = found
        _reals[(name, overload)] = op_dk
        return (op, _partial(_for_key, (name, overload)), *rest)

    real_get = torch._C._get_operation_overload
    _rebind([torch._C], {id(real_get): (real_get, get_operation_overload)})
    SEALED.extend([for_key, get_operation_overload])


def _checked_for_key(refused: set, redispatched: list):
    """(the checked entry for a dispatch key, its table {(operator, overload): real entry}): the
    task's library operators refused and noted, as _checked_entry does."""
    reals: dict = {}

    def for_key(_key, dk, *args, _reals=reals, _refused=refused, _noted=redispatched, _perm=PermissionError,
                **kwargs):
        if _key[0] in _refused:
            _noted.append(_key[0])
            raise _perm(f"ablate: {_key[0]} run for a dispatch key, a library operator of this task")
        return _reals[_key](dk, *args, **kwargs)
    return for_key, reals


def _checked_entry(real, handle_of, refused: set, redispatched: list):
    """A dispatcher entry that runs an operator's kernel without a record function, so the profiler
    never sees the call (OpOverload.redispatch; a kernel function got for a dispatch key): the
    task's library operators (`refused`, filled by the watch) are refused and noted (`redispatched`,
    read by the watch); every other operator goes on (custom operators redispatch, torch.library).
    A check, not a record function, since torch.compile drops record functions from what it
    compiles. The real entry and the containers are keyword defaults, whose reads the guard refuses
    to anyone (SEALED)."""
    def entry(self, keyset, *args, _real=real, _handle_of=handle_of, _refused=refused, _noted=redispatched,
              _perm=PermissionError, **kwargs):
        name = _handle_of(self).schema().name
        if name in _refused:
            _noted.append(name)
            raise _perm(f"ablate: {name} run past the dispatcher's record, a library operator of this task")
        return _real(self, keyset, *args, **kwargs)
    return entry


CALLED: list[str] = []  # the sealed switches the kernel called (the driver reports them: driver_tampered)
SEALED: list = []  # functions holding a real switch in a default: the guard refuses reading them to anyone


def _refused(name: str):
    def refused(*args, **kwargs):
        CALLED.append(name)
        raise PermissionError(f"torch's {name} is the evaluator's own in a candidate (its operator watch)")
    refused.__name__ = refused.__qualname__ = name
    return refused


class OpWatch:
    """The ATen operators dispatched during a batch, on every thread of the process (the run-time
    library-passthrough check): the profiler records every dispatcher call, composite operators
    included, however the call was spelled in the source (F.rms_norm, torch.nn.RMSNorm,
    torch.ops.aten..., getattr, a module object, a worker thread). Where this torch cannot watch
    other threads, `threads` is False and the judge says so.

    On a GPU (`device` "cuda") the same profile records every kernel the device ran (CUPTI, through
    torch's profiler), however it was launched: a CUDA graph replayed, another array library, a
    thread the operator watch missed. The batch's profile then lasts until the device has run the
    batch, and a library passthrough is a kernel of `kernels` ({name: library}: those the task's
    libraries run inside their own library operators, as the judge's library process recorded them)
    in any instantiation (kernel_stem), or any kernel of the vendor libraries of the task's operator
    families (vendor_kernels: cuBLAS's for a product, whatever its shape or precision).
    Each kernel first seen is kept in `new_kernels` with the operator that launched it (what the
    library process reports, and what a candidate's row shows).

    Run on the profiler's switches themselves (`sealed`: seal_switches's, or torch's own names
    where nothing is sealed), and proven whole each batch: a marker of a name drawn then is
    recorded before the calls and another after them, and a batch whose record lacks either was
    watched by a profiler stopped, restarted or blinded on the way (`tampered`)."""

    def __init__(self, names, sealed: Sealed | None = None, device: str = "cpu", kernels: dict | None = None):
        import warnings

        import torch

        self.torch = torch
        self.watched = recorded_names(names)  # in-place variants too: the same kernels
        self.seen: list[str] = []
        self.tampered: str | None = None
        self.sealed = sealed or Sealed({n: getattr(torch._C._autograd, n) for n in SWITCHES[:3]})
        self.sealed.refused.update(self.watched)
        self.mark = torch.autograd.profiler.record_function  # bound before any submission is imported
        self.on_device = device == "cuda"
        self.library_kernels = {kernel_stem(k): library for k, library in (kernels or {}).items()}
        self.vendor = vendor_kernels(self.watched)
        self.ran_library: list[str] = []  # "kernel (library)", in the order first run
        self.new_kernels: list[list] = []  # [kernel, the operator that launched it or None], not yet reported
        self.known: set[str] = set()
        try:
            self.config, self.activities, self.threads = _profiler_config(torch, self.on_device)
        except Exception:  # noqa: BLE001 (a torch that cannot profile the device: its row says so, device_unwatched)
            self.on_device = False
            self.config, self.activities, self.threads = _profiler_config(torch)
        self.lost = 0  # device sessions whose sentinel was not recorded
        self.padding_lost = 0  # padding fills whose kernel records CUPTI lost, over every session
        self.pad = torch.zeros(1, dtype=torch.int32, device="cuda" if self.on_device else "cpu")
        self.fill_, self.bitwise_not_ = torch.Tensor.fill_, torch.Tensor.bitwise_not_  # before any submission
        warnings.filterwarnings("ignore", module="torch.autograd.profiler")
        warnings.filterwarnings("ignore", module="torch.profiler")

    @contextlib.contextmanager
    def watch(self, on: bool = True):
        """Profiles the block (the caller synchronises the device inside it, on a GPU); on=False:
        not at all (the library process's warm-up call on a shape, ShapeJudge.warm_up)."""
        if not on or not self.watched and not self.on_device:
            yield
            return
        start, end = (f"ablate-watch-{os.urandom(8).hex()}-{w}" for w in ("start", "end"))
        self.sealed.switches["_prepare_profiler"](self.config, self.activities)
        self.sealed.switches["_enable_profiler"](self.config, self.activities)
        padded = 0
        try:
            if self.on_device:
                padded = self._padding()
            with self.mark(start):
                pass
            yield
        finally:
            with self.mark(end):
                pass
            try:
                result = self.sealed.switches["_disable_profiler"]()
                names, kernels = _recorded(result, self.known)
                if self.on_device:
                    fills, sentinel = _head(result)
                    self.lost += not sentinel
                    self.padding_lost += max(0, padded - fills)
                    _padding[0] = next_padding(padded, fills, sentinel)
            except Exception:  # noqa: BLE001 (no session left to stop: the kernel stopped it)
                names, kernels = set(), []
        if start not in names or end not in names:
            self.tampered = TAMPERED
        elif CALLED:
            self.tampered = f"the kernel called torch's profiler switch {CALLED[0]}, the operator watch's own"
        for name in sorted((names | set(self.sealed.redispatched)) & self.watched):
            if name not in self.seen:
                self.seen.append(name)
        for kernel, launcher in kernels:
            self.known.add(kernel)
            self.new_kernels.append([kernel, launcher])
            if library := self.library_of(kernel):
                self.ran_library.append(f"{kernel[:200]} ({library})")

    def _padding(self) -> int:
        """The session's first kernel records, the driver's own: the process's padding of fills, then
        the sentinel; run to the end before the caller queues anything (a gated batch's calls wait
        behind its gate, which must not hold these). Returns how many fills it launched."""
        n = _padding[0]
        for _ in range(n):
            self.fill_(self.pad, 0)
        self.bitwise_not_(self.pad)
        if self.pad.is_cuda:
            self.torch.cuda.current_stream().synchronize()
        return n

    def library_of(self, kernel: str) -> str | None:
        """Which of the task's libraries a device kernel is, or None: a candidate's own."""
        stem = kernel_stem(kernel)
        if stem in self.library_kernels:
            return self.library_kernels[stem]
        return self.vendor[0] if self.vendor and self.vendor[1].search(stem) else None

    def take_kernels(self) -> list[list]:
        """The device kernels first seen since the last report, at most KERNELS_PER_REPORT."""
        out, self.new_kernels = self.new_kernels[:KERNELS_PER_REPORT], self.new_kernels[KERNELS_PER_REPORT:]
        return out

    def forget_kernels(self) -> None:
        """Every device kernel counts as not yet seen (the library process, switching libraries)."""
        self.known.clear()
        self.new_kernels = []

    def findings(self) -> dict[str, str]:
        """{reason: what the watch saw} so far: the kernel's passthroughs and tampering."""
        found = {}
        if self.tampered:
            found["driver_tampered"] = self.tampered
        said = ([f"the kernel dispatched {', '.join(self.seen[:6])}"] if self.seen else []) + (
            [f"the device ran {', '.join(self.ran_library[:3])}: the library's own kernel for this operator"]
            if self.ran_library else [])
        if said:
            found["library_passthrough"] = "at run time " + "; ".join(said)
        return found


def _profiler_config(torch, on_device: bool = False):
    """(config, activities, whether every thread is watched) for a profile of CPU-side operators
    (and of the device's kernels: on_device), built by torch's own profile class for this torch's
    signature of them."""
    from torch._C._profiler import _ExperimentalConfig

    threads = True
    try:
        experimental = _ExperimentalConfig(profile_all_threads=True)
    except TypeError:
        experimental, threads = _ExperimentalConfig(), False
    prof = torch.autograd.profiler.profile(use_cpu=True, use_device="cuda" if on_device else None, use_kineto=True,
                                           experimental_config=experimental)
    try:
        config = prof.config(create_trace_id=False)
    except TypeError:
        config = prof.config()
    return config, prof.kineto_activities, threads


def _recorded(result, known=frozenset()) -> tuple[set[str], list[tuple[str, str | None]]]:
    """(the names of every operator a profile recorded, [(kernel, the operator that launched it)]
    for each device kernel not in `known`), read from the profiler's raw records: its
    key_averages() first builds a Python event and its tree for each, 8-17 times the cost at 40-400
    calls a batch (benchmarks/results/watch-cost-cpu), and the judge waits for it every batch
    before it opens the gate. Both read the same records. A kernel's launching operator is the
    innermost ATen operator running when it was launched (the profiler links the two by
    correlation id); a graph replay or a launch outside ATen (a Triton library's) has none."""
    from torch.autograd import DeviceType

    names, fresh = set(), {}
    events = result.events()
    for e in events:
        if e.device_type() != DeviceType.CPU:
            if e.name() not in known:
                fresh.setdefault(e.name(), e.linked_correlation_id())
        else:
            names.add(e.name())
    if not fresh:
        return names, []
    # ATen operators alone: the profiler's own records (its buffer requests) and the CUDA runtime's
    # calls number their records apart from the operators', so an id can name one of each
    ops = {e.correlation_id(): e.name() for e in events
           if e.device_type() == DeviceType.CPU and e.correlation_id() and e.name().startswith("aten::")}
    return names, [(k, ops.get(c) if c else None) for k, c in fresh.items()]


def next_padding(padded: int, recorded: int, sentinel: bool) -> int:
    """The fills the next session opens with, from this one's: it padded `padded` fills, the profile
    recorded `recorded` of them, and the sentinel's kernel or not. Twice the fills lost, plus
    PADDING_MIN (the loss grows with each session, pytorch/pytorch#192021), so a machine that loses
    nothing pays PADDING_MIN fills a session, not one per session the process has started; twice
    the padding when the sentinel was lost too (the loss is then unknown, past the padding). At
    most PADDING_MAX."""
    lost = max(0, padded - recorded)
    grown = 2 * max(padded, PADDING_MIN) if not sentinel else PADDING_MIN + 2 * lost
    return min(PADDING_MAX, grown)


def _head(result) -> tuple[int, bool]:
    """(how many of the driver's padding fills a profile recorded a device kernel of, whether it
    recorded the sentinel's kernel). The fills are the PADDING_FILL operators before the first
    SENTINEL one (the profiler numbers operators in the order they start), so a kernel's own
    fills, later, do not count as the padding's. Any SENTINEL kernel counts as the sentinel's: a
    kernel calling that operator itself could stand in for the driver's, which matters only where
    CUPTI lost more records than the padding, and the next session's padding is then doubled."""
    from torch.autograd import DeviceType

    events = result.events()
    ops = [(e.correlation_id(), e.name()) for e in events
           if e.device_type() == DeviceType.CPU and e.correlation_id() and e.name().startswith("aten::")]
    sentinels = {c for c, name in ops if name.startswith(SENTINEL)}
    first = min(sentinels, default=0)
    fills = {c for c, name in ops if name.startswith(PADDING_FILL) and c < first}
    linked = [e.linked_correlation_id() for e in events if e.device_type() != DeviceType.CPU]
    return sum(c in fills for c in linked), any(c in sentinels for c in linked)


def _hooks_active(torch) -> str | None:
    """A Python hook left in force when a call returns: a torch dispatch or function mode, or
    torch-function handling switched off (what a kernel could use to change what tensor
    operations do after it returned). None when there is none."""
    C = torch._C
    if C._len_torch_dispatch_stack():
        return "a TorchDispatchMode was in force"
    keys = getattr(C, "_TorchDispatchModeKey", None)
    if keys is not None and any(C._get_dispatch_mode(k) is not None for k in keys.__members__.values()):
        return "an infrastructure dispatch mode (fake, proxy or functional tensors) was in force"
    if C._len_torch_function_stack():
        return "a TorchFunctionMode was in force"
    if not C._is_torch_function_enabled():
        return "torch-function handling was switched off"
    return None


def clear_hooks(torch) -> str | None:
    """_hooks_active, and every such mode taken out of force, so the driver's own tensor operations
    after it never run through the kernel's Python."""
    why = _hooks_active(torch)
    if why is not None:
        C = torch._C
        while C._len_torch_dispatch_stack():
            C._pop_torch_dispatch_stack(None)
        keys = getattr(C, "_TorchDispatchModeKey", None)
        for k in (keys.__members__.values() if keys is not None else ()):
            if C._get_dispatch_mode(k) is not None:
                C._unset_dispatch_mode(k)
        while C._len_torch_function_stack():
            C._pop_torch_function_stack()
    return why
