"""The model gateway: how an external coding agent (Claude Code, Codex, any program) reaches a model
from inside its sandbox, and the one place its model calls are recorded, metered and limited.

    policy = gateway.policy_for(model_cfg, recorder.model)   # forward | scripted | replay
    gw = gateway.Gateway(policy, gateway.Meter(budget, price, gpu), on_call=writer.model_call)
    gw.serve_unix(dir / "gateway.sock")      # bound into the sandbox at bridge.SOCKET
    # inside: bridge.command() listens on 127.0.0.1:bridge.PORT and relays to the socket

It speaks Anthropic Messages, OpenAI Chat Completions and OpenAI Responses, streaming included
(_wire). The forwarding policy holds the key and the model's settings; the scripted policy answers
in the agent's own tools; the replay policy serves a recorded trial back.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from ablate.gateway import _bridge as bridge
from ablate.gateway._meter import Meter
from ablate.gateway._server import Gateway, Outcome, error_body
from ablate.gateway._wire import FORMATS

SCRIPTED = "ablate.harnesses.scripted:ScriptedAgent"  # the scripted policy, beside the agents: loaded by name


def policy_for(cfg: Mapping[str, Any], provider: Any = None):
    """The gateway policy for a model config: scripted and replay answer here, anthropic and openai
    are forwarded. ``provider``: the trial's model object for that config (replay reads its calls)."""
    kind = cfg.get("provider")
    if kind == "scripted":
        module, cls = SCRIPTED.split(":")
        return getattr(importlib.import_module(module), cls)(cfg)
    if kind == "replay":
        from ablate.gateway._replay import ReplayAgent
        from ablate.models._replay import ReplayModel

        model = provider if isinstance(provider, ReplayModel) else ReplayModel.from_config(cfg)
        return ReplayAgent(model.calls, model.source, model.check, model.id)
    if kind in ("anthropic", "openai"):
        from ablate.gateway._forward import Forward

        return Forward(cfg)
    raise AblateError(f"the model gateway cannot serve provider {kind!r}; valid: scripted, replay, anthropic, openai")


__all__ = ["FORMATS", "Gateway", "Meter", "Outcome", "bridge", "error_body", "policy_for"]
