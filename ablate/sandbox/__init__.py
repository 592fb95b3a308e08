"""The agent's workspace and tools: what the agent may see, and how its code runs.

    ws = Workspace.create(path, {"reference.py": b"...", "task.md": b"..."}, limits)
    tools = core_tools(ws)              # bash, read_file, write_file, list_files, submit
    result = tools["bash"].run({"command": "python check.py"})
    ws.describe()                       # confinement, mode, limits: for the trial record

Commands run under bubblewrap (no network, no project checkout, no other trials, a process,
CPU-time and file-size limit, a wall-clock timeout that kills the whole sandbox) unless the
user opts into ``sandbox.confinement=none``.
"""
from ablate.sandbox._exec import ExecResult
from ablate.sandbox._tools import Tool, ToolResult, core_tools, truncate
from ablate.sandbox._workspace import CONFINEMENTS, Limits, Workspace

__all__ = ["CONFINEMENTS", "ExecResult", "Limits", "Tool", "ToolResult", "Workspace", "core_tools", "truncate"]
