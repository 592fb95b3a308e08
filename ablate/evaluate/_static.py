"""Static checks of kernel.py: does it parse, does it define `kernel`, does it call the library
it is meant to beat (a library passthrough is never counted as the agent's kernel)?

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
    if any(_under(m, "operators") or m.split(".")[-1] == "reference" for m in modules) or "reference" in aliases:
        found.append("reference")
    return found
