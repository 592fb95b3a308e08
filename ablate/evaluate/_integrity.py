"""Identity checks of what the driver relies on, taken before the submission is imported: a
submission that replaces a timer, a comparison or a driver function is caught afterwards.

Python raises no audit event when a module's or a class's attribute is written, or a closure's
cell, and a kernel reaches the evaluator's own modules without asking for anything the guard
refuses (``object.__subclasses__()`` to a class of the driver, a method's ``__globals__`` to its
module). So the snapshot covers, besides the named timers and library functions:
  - every global of the evaluator's modules loaded when it is taken (the kit: ``ablate.*``,
    ``operators.*``), and every attribute of the classes they define;
  - the cells of the closures among them;
  - the builtins the kit's modules use (their private copy) and the interpreter's own.
A replacement found after a call is ``driver_tampered`` (a timer: ``timer_tampered``). What it
cannot see: a write undone before the driver looks, and state that is not a name's binding (an
instance's attributes, a container's contents)."""
from __future__ import annotations

import builtins
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
KIT_PACKAGES = ("ablate",)  # the evaluator's own modules, as the candidate loads them


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


_MISSING = object()
_proxy_get = type(vars(object)).get  # a class's namespace (a read-only view of a live dict)


def _reader():
    """resolve(dotted) -> the object now, or _MISSING: as _resolve, from primitives bound now
    (the interpreter's own module table, namespaces read through their C accessors), so that no
    module attribute a kernel can rebind (importlib.import_module, inspect.getattr_static)
    decides what the snapshot sees."""
    modules, missing, dict_get, proxy_get, join, split = sys.modules, _MISSING, dict.get, _proxy_get, ".".join, str.split
    mro_of, is_type, ns_of = type.__dict__["__mro__"].__get__, isinstance, vars
    type_, module_type = type, type(sys)

    def attr(obj, name):
        if is_type(obj, type_):
            for k in mro_of(obj):
                v = proxy_get(ns_of(k), name, missing)
                if v is not missing:
                    return v
            return missing
        if is_type(obj, module_type):
            return dict_get(ns_of(obj), name, missing)
        return missing

    def resolve(dotted: str):
        parts = split(dotted, ".")
        for cut in range(len(parts), 0, -1):
            obj = dict_get(modules, join(parts[:cut]), missing)
            if obj is missing:
                continue
            for name in parts[cut:]:
                obj = attr(obj, name)
                if obj is missing:
                    return missing
            return obj
        return missing

    return resolve


def _cell_get(cell, _name, default):
    try:
        return cell.cell_contents
    except ValueError:
        return default


def _bindings() -> list[tuple[str, object, object, object, object]]:
    """(label, get, namespace, name, value) of every binding the driver's code can depend on:
    kit module globals, kit class attributes, closure cells, the kit's private builtins and the
    interpreter's; get(namespace, name, default) reads the binding now."""
    out: list = []
    seen_builtins: set[int] = set()
    for modname, mod in sorted(sys.modules.items()):
        if modname.split(".")[0] not in KIT_PACKAGES or mod is None:
            continue
        g = getattr(mod, "__dict__", None)
        if not isinstance(g, dict):
            continue
        for name, value in list(g.items()):
            out.append((f"{modname}.{name}", dict.get, g, name, value))
            if isinstance(value, type) and value.__module__ == modname:
                space = vars(value)
                out += [(f"{modname}.{name}.{attr}", _proxy_get, space, attr, v) for attr, v in list(space.items())]
            fn = getattr(value, "__func__", value)
            for i, cell in enumerate(getattr(fn, "__closure__", None) or ()) if callable(fn) else ():
                out.append((f"{modname}.{name} (closure cell {i})", _cell_get, cell, None, _cell_get(cell, None, _MISSING)))
        b = g.get("__builtins__")
        b = b if isinstance(b, dict) else getattr(b, "__dict__", None)
        if isinstance(b, dict) and id(b) not in seen_builtins:
            seen_builtins.add(id(b))
            label = "builtins" if b is builtins.__dict__ else "the kit's builtins"
            out += [(f"{label}.{k}", dict.get, b, k, v) for k, v in list(b.items())]
    if id(builtins.__dict__) not in seen_builtins:
        out += [(f"builtins.{k}", dict.get, builtins.__dict__, k, v) for k, v in list(builtins.__dict__.items())]
    return out


class Snapshot:
    """What timers, library functions and the evaluator's own bindings are, before the submission
    is imported. The driver calls the C-level callables it captured, so a replacement changes
    nothing it measures; a kernel that replaces one all the same is rejected for trying.
    tampered() uses only what this instance bound when it was made (a kernel that rewrites this
    module's globals or builtins changes nothing it does)."""

    def __init__(self):
        self.names = {}
        for dotted in TIMER_NAMES + DRIVER_NAMES:
            try:
                self.names[dotted] = _resolve(dotted)
            except (LookupError, AttributeError):
                pass  # absent in this build (e.g. CUDA events on a CPU-only torch)
        self.bindings = _bindings()
        # what tampered() calls, bound now
        self._resolve, self._timers, self._missing = _reader(), frozenset(TIMER_NAMES), _MISSING

    def tampered(self) -> dict[str, list[str]]:
        """{"timer_tampered": [names], "driver_tampered": [names]}, empty lists when intact."""
        found = {"timer_tampered": [], "driver_tampered": []}
        for dotted, obj in self.names.items():
            if self._resolve(dotted) is not obj:
                found["timer_tampered" if dotted in self._timers else "driver_tampered"].append(dotted)
        missing, changed = self._missing, found["driver_tampered"]
        for label, get, space, name, value in self.bindings:
            if get(space, name, missing) is not value and label not in changed:
                changed.append(label)
        return found
