"""Identity checks of what the driver relies on, taken before the submission is imported: a
submission that replaces a timer, a comparison or a driver function is caught afterwards."""
from __future__ import annotations

import importlib
import inspect
import sys

from ablate.evaluate._reasons import TIMER_NAMES

DRIVER_NAMES = (
    "torch.Tensor", "torch.equal", "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.zero_",
    "torch.Tensor.cpu", "torch.Tensor.contiguous", "torch.Tensor.detach", "torch.Tensor.untyped_storage",
    "os.pwrite", "torch.Tensor.view", "torch.Tensor.reshape", "threading.enumerate", "os.listdir", "os.write",
    "json.dumps", "inspect.signature", "os.memfd_create", "os.ftruncate", "fcntl.fcntl", "socket.send_fds",
    "socket.socket.sendmsg", "builtins.type", "builtins.isinstance", "builtins.open", "builtins.len",
    "builtins.sorted", "builtins.memoryview", "sys.audit", "sys.addaudithook",
)


def _resolve(dotted: str):
    """The object a dotted name refers to, raw (descriptors unbound, so identity is stable)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:cut]))
        if mod is None:
            try:
                mod = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
        obj = mod
        for name in parts[cut:]:
            obj = inspect.getattr_static(obj, name)
        return obj
    raise LookupError(dotted)


class Snapshot:
    """What timers and library functions are, before the submission is imported. The driver calls
    the C-level callables it captured, so a replacement changes nothing it measures; a kernel
    that replaces one all the same is rejected for trying."""

    def __init__(self):
        self.names = {}
        for dotted in TIMER_NAMES + DRIVER_NAMES:
            try:
                self.names[dotted] = _resolve(dotted)
            except (LookupError, AttributeError):
                pass  # absent in this build (e.g. CUDA events on a CPU-only torch)

    def tampered(self) -> dict[str, list[str]]:
        """{"timer_tampered": [names], "driver_tampered": [names]}, empty lists when intact."""
        found = {"timer_tampered": [], "driver_tampered": []}
        for dotted, obj in self.names.items():
            try:
                same = _resolve(dotted) is obj
            except (LookupError, AttributeError):
                same = False
            if not same:
                found["timer_tampered" if dotted in TIMER_NAMES else "driver_tampered"].append(dotted)
        return found
