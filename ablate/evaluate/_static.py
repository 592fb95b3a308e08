"""Static checks of kernel.py: does it parse, does it define `kernel`, does it call the library
it is meant to beat (a library passthrough is never counted as the agent's kernel), and does it
use what a kernel has no business using (forbidden: frame and garbage-collector introspection,
code replacement, ctypes, processes, /proc, private torch internals, dynamic code)?

Patterns in an operator's ``library_calls``:
  "torch.nn.functional.rms_norm"  a dotted name, matched after resolving import aliases
                                  (``import torch.nn.functional as F; F.rms_norm``), getattr with
                                  a constant name, from-imports and importlib/__import__ of it;
  "liger_kernel"                  a module: any import or use of it or its submodules;
  "Tensor.softmax"                a method: ``.softmax`` on any value that is not an imported module;
  "@"                             the matmul operator.
Importing the evaluator's operators or a module named ``reference``, or calling ``reference``,
is always a passthrough.
"""
from __future__ import annotations

import ast

_DYNAMIC = ("exec", "globals", "setattr", "__dict__", "locals")


def parse(source: str) -> tuple[ast.Module | None, str | None]:
    try:
        return ast.parse(source), None
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes
        line = getattr(e, "lineno", None)
        return None, f"line {line}: {e.msg}" if line and hasattr(e, "msg") else str(e)


ENTRY_NAMES = ("kernel", "ModelNew")  # kernel(*inputs), or KernelBench's class ModelNew


def defines_kernel(tree: ast.Module, source: str) -> bool:
    """False only when nothing can bind an entry point (`kernel`, or `ModelNew` for operators
    whose entry builds one); dynamic code gets the benefit of the doubt: the candidate process,
    through the operator's kernel_of(), has the last word."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in ENTRY_NAMES:
            return True
        if isinstance(node, ast.Name) and node.id in ENTRY_NAMES and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[0]) in ENTRY_NAMES:
            return True
    return any(word in source for word in _DYNAMIC)


def _imports(tree: ast.Module) -> tuple[dict[str, str], set[str]]:
    """Local alias -> dotted module path, and every module path imported."""
    aliases: dict[str, str] = {}
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                modules.add(a.name)
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module)
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                modules.add(f"{node.module}.{a.name}")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and _dotted(node.func) in ("importlib.import_module", "__import__"):
            modules.add(node.args[0].value)
    return aliases, modules


def _dotted(node: ast.AST) -> str | None:
    """'a.b.c' for an attribute chain on a name, getattr(a, 'b') included; '<expr>.c' when the
    chain starts from an expression (a call, a subscript)."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            parts.append(node.args[1].value)
            node = node.args[0]
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            return ".".join(reversed(parts))
        else:
            if not parts:
                return None
            parts.append("<expr>")
            return ".".join(reversed(parts))


def _under(name: str, pattern: str) -> bool:
    return name == pattern or name.startswith(pattern + ".")


def passthrough(tree: ast.Module, library_calls: tuple[str, ...]) -> list[str]:
    """The library names (or 'reference') this source uses; empty when it is clean."""
    aliases, modules = _imports(tree)
    names: set[str] = set()  # raw and alias-resolved dotted names
    methods: set[str] = set()  # attributes read from values that are not imported modules
    matmul = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
            matmul = True
        if isinstance(node, (ast.Attribute, ast.Name, ast.Call)):
            d = _dotted(node)
            if not d:
                continue
            names.add(d)
            head, _, rest = d.partition(".")
            if head in aliases:
                names.add(aliases[head] + ("." + rest if rest else ""))
            elif rest:
                methods.add(d.rsplit(".", 1)[1])
    found = []
    for pattern in library_calls:
        if pattern == "@":
            hit = matmul
        elif pattern.startswith("Tensor."):
            hit = pattern[len("Tensor."):] in methods
        else:
            hit = any(_under(n, pattern) for n in names | modules)
        if hit:
            found.append(pattern)
    if any(_under(m, "operators") or _under(m, "ablate.operators") or m.split(".")[-1] == "reference"
           for m in modules) or "reference" in aliases:
        found.append("reference")
    return found


# What a kernel has no business doing. Dotted names match after resolving import aliases.
FORBIDDEN_NAMES = (
    "sys._getframe", "sys._current_frames", "sys._current_exceptions", "sys.settrace", "sys.setprofile",
    "sys.monitoring", "sys.modules", "sys.addaudithook", "sys.audit",
    "inspect.currentframe", "inspect.stack", "inspect.getouterframes", "inspect.getinnerframes", "inspect.trace",
    "traceback.walk_stack", "traceback.walk_tb", "threading.settrace", "threading.setprofile",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "ctypes", "_ctypes", "cffi", "numpy.ctypeslib", "mmap", "marshal", "pickle", "dill", "cloudpickle",
    "subprocess", "_posixsubprocess", "multiprocessing", "pty", "concurrent.futures.process", "os.fork", "os.forkpty", "os.system",
    "os.popen", "os.kill", "os.killpg", "os.posix_spawn", "os.posix_spawnp", "os.execv", "os.execve",
    "os.execvp", "os.execl", "os.execlp", "os.spawnv", "os.spawnl", "os.setuid", "os.chroot", "os.unshare",
    "os.setns", "builtins", "importlib.reload", "types.FunctionType", "types.CodeType",
    "torch._C", "torch.ops", "torch._dynamo", "torch._inductor", "torch.utils._python_dispatch",
    "torch.overrides", "torch.cuda.cudart", "cupy.cuda.runtime",
    # handed frames, or calling what they are handed, on the kernel's behalf
    "signal.signal", "signal.setitimer", "signal.alarm", "_signal", "unittest.mock", "weakref.finalize",
    "atexit.register", "torch.jit", "torch.fx", "torch.package",
)
FORBIDDEN_BUILTINS = ("exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint")
FORBIDDEN_ATTRS = ("__code__", "__globals__", "__closure__", "__builtins__", "__subclasses__", "__bases__",
                   "__mro__", "__dict__", "f_back", "f_locals", "f_globals", "f_code", "tb_frame", "gi_frame",
                   "cr_frame", "ag_frame", "co_code", "cell_contents", "__wrapped__", "__defaults__",
                   "__kwdefaults__", "__base__")
_PATHS = ("/proc", "/dev/mem", "/sys/kernel", "/dev/shm", "/dev/fd/", "thread-self")


def forbidden(tree: ast.Module) -> list[str]:
    """What the source uses that a kernel has no business using, with line numbers: empty when
    clean. Catches the plain spellings; the candidate's run-time guard catches the rest."""
    aliases, modules = _imports(tree)
    found: dict[str, int] = {}

    def hit(what: str, node) -> None:
        found.setdefault(what, getattr(node, "lineno", 0))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if node.module else []
            for n in names:
                for pattern in FORBIDDEN_NAMES:
                    if _under(n, pattern):
                        hit(pattern, node)
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRS:
            hit(node.attr, node)
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_BUILTINS and node.id not in aliases:
            hit(f"{node.id}()", node)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and any(p in node.value for p in _PATHS):
            hit(f"the path {node.value[:40]!r}", node)
        if isinstance(node, (ast.Attribute, ast.Name, ast.Call)):
            d = _dotted(node)
            if d:
                head, _, rest = d.partition(".")
                full = aliases[head] + ("." + rest if rest else "") if head in aliases else d
                for pattern in FORBIDDEN_NAMES:
                    if _under(full, pattern):
                        hit(pattern, node)
                if full.startswith("torch._") or (full.startswith("torch.") and "._" in full[6:]):
                    hit(f"private torch API {full}", node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr",
                                                                                              "delattr", "hasattr"):
            target = _dotted(node.args[0]) if node.args else None
            head = (target or "").split(".")[0]
            dynamic = len(node.args) < 2 or not isinstance(node.args[1], ast.Constant)
            if head in aliases and (dynamic or node.func.id != "getattr"):
                hit(f"{node.func.id}() on the module {aliases[head]}", node)
    for m in modules:  # importlib.import_module("ctypes") and the like
        for pattern in FORBIDDEN_NAMES:
            if _under(m, pattern):
                hit(pattern, tree)
    return [f"{what} (line {line})" if line else what for what, line in sorted(found.items(), key=lambda kv: kv[1])]
