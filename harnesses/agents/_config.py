"""What a harness's `agent:` node says, and the hash of everything it gives the agent.

    agent:
      name: claude_code                 # ablate (the default: ablate's own loop) | claude_code | codex | command
      version: null                     # null: the pinned version (harnesses/agents/_install.py)
      skills: {KernelWiki: /path/to/KernelWiki}           # folders, each holding a SKILL.md
      plugins: {humanize: /path/to/humanize}              # Claude Code plugin folders
      instructions: /path/to/CLAUDE.md                    # the agent's user-level instructions file
      mcp_servers: {ncu: {command: python, args: [...]}}  # run inside the sandbox, like the agent
      settings: {}                      # Claude Code settings.json keys; Codex config.toml keys
      path: null                        # command: the folder holding the program (read-only inside)
      command: []                       # command: its argv; {prompt} and {task} are filled in

Each skill, plugin, the instructions file, each MCP server and each setting is one *item*, named
``skill:KernelWiki``, ``plugin:humanize``, ``instructions``, ``mcp:ncu``, ``setting:model_reasoning_effort``.
A study's ablation adds or removes items one at a time (ablations.derived), as it does mechanisms.
The record holds each item's content hash (a folder: every file's path and bytes), and the trial id
holds the hash of them all with the agent's name and version: editing a skill re-runs exactly the
arms that use it.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from ablate.errors import AblateError

NAMES = ("ablate", "claude_code", "codex", "command")
KINDS = ("skill", "plugin", "instructions", "mcp", "setting")
MAX_FOLDER_BYTES = 256 << 20  # a skill or plugin folder copied into every trial


@dataclass
class AgentConfig:
    """The `agent:` node of a harness config (schema: ablate/config.py)."""

    name: str = "ablate"
    version: Optional[str] = None
    skills: Dict[str, str] = field(default_factory=dict)
    plugins: Dict[str, str] = field(default_factory=dict)
    instructions: Optional[str] = None
    mcp_servers: Dict[str, Any] = field(default_factory=dict)
    settings: Dict[str, Any] = field(default_factory=dict)
    path: Optional[str] = None
    command: List[str] = field(default_factory=list)


def parse(node: Mapping[str, Any] | None, label: str = "harness") -> AgentConfig | None:
    """The agent config of a harness node; None for ablate's own loop. Raises AblateError naming the
    bad key or value and the valid ones."""
    if not node:
        return None
    valid = AgentConfig.__dataclass_fields__
    unknown = [k for k in node if k not in valid]
    if unknown:
        raise AblateError(f"{label}: agent has no key {unknown[0]!r}; valid: {', '.join(valid)}")
    cfg = AgentConfig(**{k: v for k, v in node.items()})
    if cfg.name not in NAMES:
        raise AblateError(f"{label}: unknown agent {cfg.name!r}; valid agents: {', '.join(NAMES)}")
    if cfg.name == "ablate":
        extra = [k for k in ("skills", "plugins", "mcp_servers", "settings", "command") if getattr(cfg, k)]
        extra += [k for k in ("instructions", "path", "version") if getattr(cfg, k)]
        if extra:
            raise AblateError(f"{label}: agent ablate (ablate's own loop) takes mechanisms, not {extra[0]}; "
                              f"set agent.name to claude_code, codex or command")
        return None
    for kind in ("skills", "plugins", "mcp_servers", "settings"):
        if not isinstance(getattr(cfg, kind), Mapping):
            raise AblateError(f"{label}: agent.{kind} must be a mapping of name to value")
    if cfg.name == "command" and not cfg.command:
        raise AblateError(f"{label}: agent command needs agent.command, its argv (e.g. [python, "
                          f"/opt/ablate/agent/agent.py, '{{prompt}}']) and agent.path, the folder holding it")
    return cfg


def absolute(node: Mapping[str, Any] | None, base: str | None = None) -> dict[str, Any] | None:
    """The node with every path made absolute (relative ones are taken from ``base``, the directory
    ablate runs in), so a trial run in another process or on another node finds the same files."""
    if not node:
        return dict(node) if node is not None else None
    base = base or os.getcwd()

    def fix(p: Any) -> Any:
        return str(Path(base, os.path.expanduser(str(p))).resolve()) if p else p

    out = dict(node)
    for kind in ("skills", "plugins"):
        out[kind] = {k: fix(v) for k, v in (node.get(kind) or {}).items()}
    for key in ("instructions", "path"):
        out[key] = fix(node.get(key))
    return out


def digest(path: str | Path, what: str) -> str:
    """sha256 of a file, or of a folder's files (relative path and bytes, in order; links as links)."""
    p = Path(path)
    h = hashlib.sha256()
    if p.is_file():
        h.update(p.read_bytes())
        return h.hexdigest()
    if not p.is_dir():
        raise AblateError(f"{what}: {path} does not exist; point it at the {what.split(':')[0]}'s folder or file")
    total = 0
    for root, dirs, files in os.walk(p):
        dirs.sort()
        for name in sorted(files):
            f = Path(root, name)
            rel = f.relative_to(p).as_posix()
            h.update(rel.encode() + b"\0")
            if f.is_symlink():
                h.update(b"link:" + os.readlink(f).encode())
            else:
                data = f.read_bytes()
                total += len(data)
                h.update(hashlib.sha256(data).digest())
            if total > MAX_FOLDER_BYTES:
                raise AblateError(f"{what}: {path} holds over {MAX_FOLDER_BYTES >> 20} MiB; point it at the "
                                  f"skill's own folder")
    return h.hexdigest()


def items(cfg: AgentConfig) -> dict[str, Any]:
    """Every item of the configuration by name, with its value as configured."""
    out: dict[str, Any] = {}
    out.update({f"skill:{k}": v for k, v in cfg.skills.items()})
    out.update({f"plugin:{k}": v for k, v in cfg.plugins.items()})
    if cfg.instructions:
        out["instructions"] = cfg.instructions
    out.update({f"mcp:{k}": v for k, v in cfg.mcp_servers.items()})
    out.update({f"setting:{k}": v for k, v in cfg.settings.items()})
    return out


def hashes(cfg: AgentConfig) -> dict[str, str]:
    """Each item's content hash: folders and files by their bytes, the rest by its JSON."""
    out = {}
    for name, value in items(cfg).items():
        kind = name.split(":")[0]
        if kind in ("skill", "plugin", "instructions"):
            out[name] = digest(value, name)
        else:
            out[name] = hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
    if cfg.path:
        out["program"] = digest(cfg.path, "agent.path")
    if cfg.command:
        out["command"] = hashlib.sha256(json.dumps(list(cfg.command)).encode()).hexdigest()
    return out


def with_items(node: Mapping[str, Any], chosen: Mapping[str, Any]) -> dict[str, Any]:
    """The agent node with exactly these items (as items() names them) and everything else kept."""
    out = {k: v for k, v in node.items() if k not in ("skills", "plugins", "instructions", "mcp_servers", "settings")}
    out.update(skills={}, plugins={}, instructions=None, mcp_servers={}, settings={})
    for name, value in chosen.items():
        kind, _, key = name.partition(":")
        if kind == "instructions":
            out["instructions"] = value
        else:
            out[{"skill": "skills", "plugin": "plugins", "mcp": "mcp_servers", "setting": "settings"}[kind]][key] = value
    return out
