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
    "os.pwrite", "torch.Tensor.view", "torch.Tensor.reshape", "threading.enumerate", "os.listdir", "os.write", "json.dumps", "inspect.signature",
    "builtins.type", "builtins.isinstance", "builtins.open",
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
    def __init__(self, modules):
        self.names = {}
        for dotted in TIMER_NAMES + DRIVER_NAMES:
            try:
                self.names[dotted] = _resolve(dotted)
            except (LookupError, AttributeError):
                pass  # absent in this build (e.g. CUDA events on a CPU-only torch)
        # every function and class in the driver's own modules, and the methods of those classes
        self.modules = [(m, {k: v for k, v in vars(m).items() if callable(v)}) for m in modules]
        self.modules += [(cls, dict(vars(cls))) for m, saved in list(self.modules) for cls in saved.values()
                         if isinstance(cls, type) and cls.__module__ == m.__name__]

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
        for mod, saved in self.modules:
            d = vars(mod)
            for k, v in saved.items():
                if d.get(k) is not v:
                    found["driver_tampered"].append(f"{mod.__name__}.{k}")
        return found
