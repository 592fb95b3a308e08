"""What the candidate's driver watches in its own process, beside the judge's evidence: the ATen
operators a batch dispatched on any thread (a library passthrough), and a torch dispatch or
function mode the kernel left in force (taken out of force before the driver's own tensor
operations, and reported)."""
from __future__ import annotations

import contextlib


class OpWatch:
    """The ATen operators dispatched during a batch, on every thread of the process (the run-time
    library-passthrough check): the profiler records every dispatcher call, composite operators
    included, however the call was spelled in the source (F.rms_norm, torch.nn.RMSNorm,
    torch.ops.aten..., getattr, a module object, a worker thread). Where this torch cannot watch
    other threads, `threads` is False and the judge says so."""

    def __init__(self, names):
        import warnings

        import torch

        self.torch = torch
        self.watched = frozenset(names)
        self.seen: list[str] = []
        self.threads = True
        warnings.filterwarnings("ignore", module="torch.autograd.profiler")
        warnings.filterwarnings("ignore", module="torch.profiler")

    def _profiler(self):
        prof = self.torch.profiler
        try:
            cfg = self.torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
            return prof.profile(activities=[prof.ProfilerActivity.CPU], experimental_config=cfg)
        except (AttributeError, TypeError):
            self.threads = False
            return prof.profile(activities=[prof.ProfilerActivity.CPU])

    @contextlib.contextmanager
    def watch(self):
        if not self.watched:
            yield
            return
        with self._profiler() as p:
            yield
        for name in sorted(_recorded(p) & self.watched):
            if name not in self.seen:
                self.seen.append(name)


def _recorded(p) -> set[str]:
    """The names of every operator a finished profile recorded, read from the profiler's raw
    results: key_averages() first builds a Python event and its tree for each, 7-18 times the cost
    at 40-400 calls a batch (benchmarks/results/watch-cost-cpu), and the judge waits for it every
    batch before it opens the gate. Both read the same records."""
    results = getattr(getattr(p, "profiler", None), "kineto_results", None)
    if results is None:  # a torch without the raw results
        return {e.key for e in p.key_averages()}
    return {e.name() for e in results.events()}


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
