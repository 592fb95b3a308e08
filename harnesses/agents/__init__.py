"""External coding agents as a harness's agent: Claude Code, Codex CLI, or any program, in ablate's
sandbox, behind ablate's model gateway (ablate.gateway).

A harness names its agent (``agent.name``): ``ablate`` (ablate's own loop, the default),
``claude_code`` or ``codex`` (the published CLIs at pinned versions: ``python -m ablate.harnesses.agents
install``), or ``command``. What the agent is given beyond the goal (skills, plugins, an
instructions file, MCP servers, settings) is its configuration (_config): hashed item by item into
the record, and as a whole into the trial id; a study's ablation adds or removes one item at a time.

    agent = agents.build({"name": "claude_code", "skills": {"KernelWiki": "/path"}}, "kda_claude")
    agent.describe()      # name, version, binary hash, each item's hash, the configuration's hash
    agent.run(model, task, ws, budget, model_config=spec.model, progress=..., after_tool=...)
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from ablate.harnesses import _documents
from ablate.harnesses.agents import _config, _install
from ablate.harnesses.agents._agents import AGENTS, External
from ablate.harnesses.agents._config import NAMES, AgentConfig, absolute, items, parse, with_items
from ablate.harnesses.agents._install import PINNED, install, installed


class Agent:
    """An external agent as a harness runs it (harnesses.Harness delegates its run here)."""

    def __init__(self, impl: External):
        self.impl = impl
        self.name = impl.name

    def describe(self) -> dict[str, Any]:
        cfg = self.impl.cfg
        configuration = _config.hashes(cfg)
        return {**self.impl.identity(), "configuration": configuration,
                "configuration_hash": key({"agent": cfg.__dict__}),
                "prompt": _documents.hashes((_prompt_document(),))}

    def run(self, model, task, ws, budget, progress=None, after_tool=None, model_config=None):
        from ablate.harnesses.agents._run import run

        return run(self.impl, model, task, ws, budget, model_config, progress, after_tool)


def _prompt_document() -> str:
    from ablate.harnesses.agents._run import PROMPT

    return PROMPT


def build(node: Mapping[str, Any] | None, label: str = "harness") -> Agent | None:
    """The external agent a harness's `agent:` node names (None: ablate's own loop). Checks the
    configuration's files exist and the CLI is installed, or raises AblateError saying how."""
    cfg = parse(node, label)
    if cfg is None:
        return None
    impl = AGENTS[cfg.name](cfg)
    _config.hashes(cfg)  # every file and folder it names exists
    if cfg.name in PINNED:
        _install.require(cfg.name, cfg.version)
    return Agent(impl)


def items_of(harness: Mapping[str, Any]) -> dict[str, Any]:
    """An arm's agent configuration items (skill:NAME, plugin:NAME, instructions, mcp:NAME,
    setting:KEY), which a study's ablation adds and removes like mechanisms; {} for ablate's loop."""
    cfg = parse(harness.get("agent"), f"arm {harness.get('name')!r}")
    return items(cfg) if cfg is not None else {}


def toggled(harness: Mapping[str, Any], item: str, value: Any) -> dict[str, Any]:
    """The arm's agent node with ``item`` set to ``value`` (None: taken out)."""
    label = f"arm {harness.get('name')!r}"
    cfg = parse(harness.get("agent"), label)
    if cfg is None:
        raise AblateError(f"{label}: cannot add {item}: its agent is ablate's own loop; give it an external "
                          f"agent (agent.name: claude_code or codex) to add skills, plugins or settings to")
    chosen = items(cfg)
    if value is None:
        chosen.pop(item, None)
    else:
        chosen[item] = value
    return with_items(harness["agent"], chosen)


def key(harness: Mapping[str, Any] | None) -> str:
    """What of a harness's agent goes into its trials' ids: "" for ablate's own loop, else a short
    hash of the agent's name, version and every configuration item's content."""
    node = (harness or {}).get("agent") if isinstance(harness, Mapping) else None
    cfg = parse(node)
    if cfg is None:
        return ""
    version = cfg.version or (PINNED[cfg.name].version if cfg.name in PINNED else None)
    identity = {"name": cfg.name, "version": version, "items": _config.hashes(cfg),
                "prompt": _documents.hashes((_prompt_document(),))}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]


__all__ = ["AGENTS", "NAMES", "PINNED", "Agent", "AgentConfig", "absolute", "build", "install", "installed", "items",
           "items_of", "key", "parse", "toggled", "with_items"]
