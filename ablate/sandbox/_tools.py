"""The core tools every harness gives the agent. Mechanisms add tools of the same shape."""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ablate.models import ToolSpec
from ablate.sandbox._workspace import Workspace

MAX_LISTED = 1000  # list_files shows at most this many entries


@dataclass
class ToolResult:
    content: str
    is_error: bool = False
    submitted: bool = False  # the agent called submit: the loop ends
    seconds: float = 0.0  # time the tool ran, for the tool-time budget
    gpu_seconds: float = 0.0  # wall seconds of commands that ran with a GPU visible


@dataclass
class Tool:
    spec: ToolSpec
    run: Callable[[dict[str, Any]], ToolResult]


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


def read_text(ws: Workspace, rel: str, limit: int) -> str:
    """The file's text, or its head and tail when longer than ``limit`` characters."""
    fd = ws.open(rel, os.O_RDONLY)
    try:
        size, cap = os.fstat(fd).st_size, limit * 4
        if size <= cap:
            return truncate(os.pread(fd, size, 0).decode(errors="replace"), limit)
        head = os.pread(fd, cap // 2, 0).decode(errors="replace")[: limit // 2]
        tail = os.pread(fd, cap // 2, size - cap // 2).decode(errors="replace")[-(limit // 2):]
        return f"{head}\n... [file is {size} bytes; middle cut] ...\n{tail}"
    finally:
        os.close(fd)


def _schema(required: dict[str, str], optional: dict[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    props = {k: {"type": "string", "description": v} for k, v in required.items()}
    props |= {k: {"type": t, "description": d} for k, (t, d) in (optional or {}).items()}
    return {"type": "object", "properties": props, "required": list(required)}


def _timed(fn: Callable[[dict[str, Any]], ToolResult], name: str) -> Callable[[dict[str, Any]], ToolResult]:
    """Time the tool and turn bad arguments or file errors into an error result for the model."""

    def run(args: dict[str, Any]) -> ToolResult:
        start = time.monotonic()
        try:
            r = fn(args)
        except KeyError as e:
            r = ToolResult(f"{name}: missing argument {e}", is_error=True)
        except (OSError, ValueError, TypeError) as e:
            r = ToolResult(f"{name}: {e}", is_error=True)
        if not r.seconds:
            r.seconds = time.monotonic() - start
        return r

    return run


def core_tools(ws: Workspace) -> dict[str, Tool]:
    limit = ws.limits.output_chars

    def bash(args):
        timeout = args.get("timeout_s")
        r = ws.run(str(args["command"]), float(timeout) if timeout else None)
        if r.timed_out:
            status = f"timed out after {r.seconds:.1f}s; the command and everything it started were killed"
        else:
            status = f"exit code {r.exit_code}, {r.seconds:.1f}s"
        if r.output_capped:
            status += f"; output passed {ws.limits.max_output_bytes} bytes, so its pipe was closed"
        return ToolResult(f"{r.output}\n[{status}]", r.exit_code != 0 or r.timed_out,
                          seconds=r.seconds, gpu_seconds=r.gpu_seconds)

    def read_file(args):
        return ToolResult(read_text(ws, args["path"], limit))

    def write_file(args):
        data = str(args["content"]).encode()
        ws.write(args["path"], data)
        return ToolResult(f"wrote {len(data)} bytes to {args['path']}")

    def list_files(args):
        root = ws.resolve(args.get("path") or ".")
        if not root.is_dir():
            raise NotADirectoryError(f"{args.get('path')}: not a directory")
        names = []
        for dirpath, dirs, files in os.walk(root):  # does not follow symlinked directories
            if dirpath == str(ws.path):
                dirs[:] = [d for d in dirs if d != ".cache"]  # compiler caches, not the agent's files
            dirs.sort()
            rel = os.path.relpath(dirpath, ws.path)
            for name in dirs + files:
                full = os.path.join(dirpath, name)
                shown = os.path.normpath(os.path.join(rel, name))
                names.append(f"{shown} -> {os.readlink(full)}" if os.path.islink(full)
                             else shown + "/" if name in dirs else shown)
            if len(names) > MAX_LISTED:
                break
        more = f"\n... [listing stopped after {MAX_LISTED} entries]" if len(names) > MAX_LISTED else ""
        return ToolResult(truncate("\n".join(sorted(names)[:MAX_LISTED]) + more, limit) if names else "(empty)")

    def submit(args):
        p = ws.resolve("kernel.py")
        if not p.is_file():
            return ToolResult("submit: write kernel.py (defining kernel(*inputs)) before submitting", is_error=True)
        return ToolResult("submitted kernel.py", submitted=True)

    rel = f"path relative to the workspace ({ws.inner})"
    specs = [
        (ToolSpec("bash", f"Run a shell command in the workspace ({ws.inner}); returns its output and exit code. "
                  f"Commands are killed after {ws.limits.command_timeout_s:g} seconds.",
                  _schema({"command": "the command line"},
                          {"timeout_s": ("number", "seconds before it is killed (at most the limit)")})), bash),
        (ToolSpec("read_file", "Read a text file of the workspace.", _schema({"path": rel})), read_file),
        (ToolSpec("write_file", "Create or overwrite a text file in the workspace.",
                  _schema({"path": rel, "content": "the file's full text"})), write_file),
        (ToolSpec("list_files", "List the files under a workspace directory.",
                  _schema({}, {"path": ("string", rel + "; default the whole workspace")})), list_files),
        (ToolSpec("submit", "Submit kernel.py as your final answer. Ends the task.", _schema({})), submit),
    ]
    return {spec.name: Tool(spec, _timed(fn, spec.name)) for spec, fn in specs}
