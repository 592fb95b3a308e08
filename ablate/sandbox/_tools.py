"""The core tools every harness gives the agent. Mechanisms add tools of the same shape."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ablate.models import ToolSpec
from ablate.sandbox._workspace import Workspace


@dataclass
class ToolResult:
    content: str
    is_error: bool = False
    submitted: bool = False  # the agent called submit: the loop ends
    seconds: float = 0.0  # time the tool ran, for the tool-time budget


@dataclass
class Tool:
    spec: ToolSpec
    run: Callable[[dict[str, Any]], ToolResult]


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


def _schema(**props: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
        "required": list(props),
    }


def core_tools(ws: Workspace) -> dict[str, Tool]:
    limit = ws.limits.output_chars

    def bash(args):
        r = ws.run(str(args["command"]))
        status = "timed out" if r.timed_out else f"exit code {r.exit_code}"
        return ToolResult(truncate(f"{r.output}\n[{status}, {r.seconds:.1f}s]", limit), r.exit_code != 0, seconds=r.seconds)

    def read_file(args):
        try:
            return ToolResult(truncate(ws.resolve(args["path"]).read_text(errors="replace"), limit))
        except (OSError, PermissionError) as e:
            return ToolResult(f"read_file: {e}", is_error=True)

    def write_file(args):
        try:
            p = ws.resolve(args["path"])
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(str(args["content"]))
            return ToolResult(f"wrote {len(str(args['content']))} characters to {args['path']}")
        except (OSError, PermissionError) as e:
            return ToolResult(f"write_file: {e}", is_error=True)

    def list_files(args):
        try:
            root = ws.resolve(args.get("path", "."))
            names = sorted(str(p.relative_to(ws.path)) + ("/" if p.is_dir() else "") for p in root.rglob("*"))
            return ToolResult("\n".join(names) or "(empty)")
        except (OSError, PermissionError) as e:
            return ToolResult(f"list_files: {e}", is_error=True)

    def submit(args):
        if not (ws.path / "kernel.py").is_file():
            return ToolResult("submit: write kernel.py (defining kernel(*inputs)) before submitting", is_error=True)
        return ToolResult("submitted kernel.py", submitted=True)

    return {
        "bash": Tool(ToolSpec("bash", "Run a shell command in the workspace; returns its output and exit code.",
                              _schema(command="the command line")), bash),
        "read_file": Tool(ToolSpec("read_file", "Read a text file of the workspace.",
                                   _schema(path="path relative to the workspace")), read_file),
        "write_file": Tool(ToolSpec("write_file", "Create or overwrite a text file in the workspace.",
                                    _schema(path="path relative to the workspace", content="the file's full text")), write_file),
        "list_files": Tool(ToolSpec("list_files", "List the files under a workspace directory.",
                                    {"type": "object", "properties": {"path": {"type": "string"}}, "required": []}), list_files),
        "submit": Tool(ToolSpec("submit", "Submit kernel.py as your final answer. Ends the task.",
                                {"type": "object", "properties": {}, "required": []}), submit),
    }
