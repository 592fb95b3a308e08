"""The agent's workspace and tools: what the agent may see, and how its code runs.

    ws = Workspace.create(path, {"reference.py": b"...", "task.md": b"..."}, limits)
    tools = core_tools(ws)              # bash, read_file, write_file, list_files, submit
    result = tools["bash"].run({"command": "python check.py"})
"""
from ablate.sandbox._tools import Tool, ToolResult, core_tools
from ablate.sandbox._workspace import ExecResult, Limits, Workspace

__all__ = ["ExecResult", "Limits", "Tool", "ToolResult", "Workspace", "core_tools"]
