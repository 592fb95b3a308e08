"""The external agents: how each is configured, started and pointed at the gateway, inside the sandbox.

Inside, every agent sees: the workspace at /workspace (its working directory), its own home at
/home/agent (its configuration, skills and plugins, copied there per trial, and whatever it writes
about itself), its program read-only at /opt/ablate/agent, and the gateway at
http://127.0.0.1:<bridge.PORT> with a placeholder key: the real one never enters the sandbox.

claude_code  ``claude -p`` (print mode: no trust dialog, no onboarding, and ANTHROPIC_API_KEY is used
             as given), stream-json output, permissions skipped (the sandbox is the boundary),
             settings from the user level only, MCP servers from ours only, WebSearch and WebFetch
             off (no network), telemetry, error reports and auto-update off
             (code.claude.com/docs/en/env-vars). Skills: ~/.claude/skills/<name>/; instructions:
             ~/.claude/CLAUDE.md (user memory); plugins: --plugin-dir, one per plugin.
codex        ``codex exec --json`` with its own sandbox and approvals off (ours is the boundary), a
             model provider "ablate" (wire_api responses) at the gateway, web search disabled,
             analytics off; CODEX_HOME=/home/agent/.codex holds config.toml, skills/<name>/ and
             AGENTS.md (global instructions).
command      any program: ``agent.command`` run with {prompt} (the task) and {task} (task.md's path)
             filled in, ``agent.path`` (its folder) read-only at /opt/ablate/agent; the gateway's
             address in ABLATE_GATEWAY_URL, ANTHROPIC_BASE_URL and OPENAI_BASE_URL.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.gateway import bridge
from ablate.harnesses.agents import _config, _install

HOME = "/home/agent"  # the agent's home inside the sandbox
PROGRAM = "/opt/ablate/agent"  # its program's folder inside
WORKSPACE = "/workspace"
PLACEHOLDER_KEY = "ablate-gateway-holds-the-key"
URL = f"http://127.0.0.1:{bridge.PORT}"


def _copy(src: str, dst: Path) -> None:
    s = Path(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    if s.is_dir():
        shutil.copytree(s, dst, symlinks=True)
    else:
        shutil.copy2(s, dst)


def _key(k: Any) -> str:
    k = str(k)
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict) and not v:
        return "{}"
    raise AblateError(f"codex settings: {v!r} has no TOML form; use strings, numbers, booleans, lists and tables")


def toml(table: dict[str, Any], prefix: str = "") -> str:
    """A TOML document from nested dicts (tables) of strings, numbers, booleans and lists."""
    tables = {k: v for k, v in table.items() if isinstance(v, dict) and v}
    lines = [f"{_key(k)} = {_value(v)}" for k, v in table.items() if k not in tables]
    for k, v in tables.items():
        name = prefix + _key(k)
        lines += ["", f"[{name}]", toml(v, name + ".").rstrip("\n")]
    return "\n".join(lines).strip("\n") + "\n"


class External:
    """What every external agent shares; a subclass says how to configure and start it."""

    name = ""
    formats: tuple[str, ...] = ()  # the wire formats it speaks
    providers: tuple[str, ...] = ()  # forwarding providers that speak them

    def __init__(self, cfg: _config.AgentConfig):
        self.cfg = cfg

    def check(self, provider: str | None, model: str) -> None:
        """Refuse, in one line, a model the agent cannot talk to."""
        if provider in ("scripted", "replay", None) or provider in self.providers:
            return
        raise AblateError(f"agent {self.name} speaks {' and '.join(self.formats)}; model {model} is provider "
                          f"{provider!r}; give a model of provider {' or '.join(self.providers)}")

    def identity(self) -> dict[str, Any]:
        """Name, version and binary for the record."""
        m = _install.require(self.name, self.cfg.version)
        return {"name": self.name, "package": m["package"], "version": m["version"], "reported": m["reported"],
                "sha256": m["sha256"]}

    def binds(self) -> list[tuple[str, str]]:
        """(host folder, path inside) mounted read-only: the program."""
        return [(_install.require(self.name, self.cfg.version)["home"], PROGRAM)]

    def binary(self) -> str:
        m = _install.require(self.name, self.cfg.version)
        return f"{PROGRAM}/{Path(m['binary']).relative_to(m['home'])}"

    def prepare(self, home: Path, model: str, command_timeout_s: float) -> None:
        """Write the agent's configuration into its home (the host folder bound at HOME)."""

    def argv(self, prompt: str, model: str) -> list[str]:
        raise NotImplementedError

    def env(self, model: str, command_timeout_s: float, path: str) -> dict[str, str]:
        """Its environment, over the workspace's (``path``: the workspace's PATH)."""
        return {"HOME": HOME, "ABLATE_GATEWAY_URL": URL, "ANTHROPIC_BASE_URL": URL, "OPENAI_BASE_URL": f"{URL}/v1",
                "ANTHROPIC_API_KEY": PLACEHOLDER_KEY, "OPENAI_API_KEY": PLACEHOLDER_KEY, "ABLATE_MODEL": model}


class ClaudeCode(External):
    name = "claude_code"
    formats = ("Anthropic Messages",)
    providers = ("anthropic",)

    def prepare(self, home: Path, model: str, command_timeout_s: float) -> None:
        claude = home / ".claude"
        claude.mkdir(parents=True, exist_ok=True)
        for name, path in self.cfg.skills.items():
            _copy(path, claude / "skills" / name)
        for name, path in self.cfg.plugins.items():
            _copy(path, home / "plugins" / name)
        if self.cfg.instructions:
            _copy(self.cfg.instructions, claude / "CLAUDE.md")
        (claude / "settings.json").write_text(json.dumps(dict(self.cfg.settings), indent=1))
        (home / "mcp.json").write_text(json.dumps({"mcpServers": dict(self.cfg.mcp_servers)}, indent=1))

    def argv(self, prompt: str, model: str) -> list[str]:
        argv = [self.binary(), "-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions",
                "--model", model, "--setting-sources", "user", "--disallowedTools", "WebSearch,WebFetch",
                "--strict-mcp-config", "--mcp-config", f"{HOME}/mcp.json"]
        for name in self.cfg.plugins:
            argv += ["--plugin-dir", f"{HOME}/plugins/{name}"]
        return argv + ["--", prompt]

    def env(self, model: str, command_timeout_s: float, path: str) -> dict[str, str]:
        ms = str(int(command_timeout_s * 1000))
        return {**super().env(model, command_timeout_s, path), "ANTHROPIC_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
                "ANTHROPIC_DEFAULT_OPUS_MODEL": model, "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
                "ANTHROPIC_DEFAULT_HAIKU_MODEL": model, "CLAUDE_CODE_SUBAGENT_MODEL": model,
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
                "DISABLE_ERROR_REPORTING": "1", "DISABLE_BUG_COMMAND": "1", "IS_SANDBOX": "1",
                "BASH_DEFAULT_TIMEOUT_MS": ms, "BASH_MAX_TIMEOUT_MS": ms}


class Codex(External):
    name = "codex"
    formats = ("OpenAI Responses",)
    providers = ("openai",)
    # Codex picks its prompt and tools (apply_patch, exec_command) by the model's name; for the
    # scripted model, whose name it does not know, it is told the model its pinned version
    # defaults to, so that it offers the tools it offers a real model (the gateway sets the model).
    STAND_IN = "gpt-5.5"

    def model_name(self, model: str) -> str:
        return self.STAND_IN if model.removeprefix("replay:").startswith("scripted-") else model.removeprefix("replay:")

    def prepare(self, home: Path, model: str, command_timeout_s: float) -> None:
        codex = home / ".codex"
        codex.mkdir(parents=True, exist_ok=True)
        if self.cfg.plugins:
            raise AblateError(f"agent codex takes no plugins (got {', '.join(self.cfg.plugins)}); "
                              f"give them to claude_code, or give codex skills")
        for name, path in self.cfg.skills.items():
            _copy(path, codex / "skills" / name)
        if self.cfg.instructions:
            _copy(self.cfg.instructions, codex / "AGENTS.md")
        config = {"model": self.model_name(model), "model_provider": "ablate", "approval_policy": "never",
                  "sandbox_mode": "danger-full-access", "web_search": "disabled", **dict(self.cfg.settings),
                  "model_providers": {"ablate": {"name": "ablate gateway", "base_url": f"{URL}/v1",
                                                 "env_key": "OPENAI_API_KEY", "wire_api": "responses"}},
                  "analytics": {"enabled": False}}
        if self.cfg.mcp_servers:
            config["mcp_servers"] = {k: dict(v) for k, v in self.cfg.mcp_servers.items()}
        (codex / "config.toml").write_text(toml(config))

    def argv(self, prompt: str, model: str) -> list[str]:
        return [self.binary(), "exec", "--json", "--color", "never", "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox", "-C", WORKSPACE, "-m", self.model_name(model), "--", prompt]

    def env(self, model: str, command_timeout_s: float, path: str) -> dict[str, str]:
        return {**super().env(model, command_timeout_s, path), "CODEX_HOME": f"{HOME}/.codex", "RUST_LOG": "warn",
                "PATH": f"{PROGRAM}/codex-path:{path}"}


class Command(External):
    name = "command"
    formats = ("Anthropic Messages", "OpenAI Chat Completions", "OpenAI Responses")
    providers = ("anthropic", "openai")

    def identity(self) -> dict[str, Any]:
        program = _config.digest(self.cfg.path, "agent.path") if self.cfg.path else None
        return {"name": "command", "command": list(self.cfg.command), "program_sha256": program}

    def binds(self) -> list[tuple[str, str]]:
        if not self.cfg.path:
            return []
        if not Path(self.cfg.path).is_dir():
            raise AblateError(f"agent.path {self.cfg.path} is not a folder; point it at the folder holding the program")
        return [(self.cfg.path, PROGRAM)]

    def prepare(self, home: Path, model: str, command_timeout_s: float) -> None:
        for name, path in self.cfg.skills.items():
            _copy(path, home / "skills" / name)
        for name, path in self.cfg.plugins.items():
            _copy(path, home / "plugins" / name)
        if self.cfg.instructions:
            _copy(self.cfg.instructions, home / "INSTRUCTIONS.md")
        (home / "settings.json").write_text(json.dumps({"settings": dict(self.cfg.settings),
                                                        "mcp_servers": dict(self.cfg.mcp_servers)}, indent=1))

    def argv(self, prompt: str, model: str) -> list[str]:
        return [a.replace("{prompt}", prompt).replace("{task}", f"{WORKSPACE}/task.md") for a in self.cfg.command]


AGENTS = {a.name: a for a in (ClaudeCode, Codex, Command)}
