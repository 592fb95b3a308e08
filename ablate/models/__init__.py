"""Model providers, registered by name. SDKs are imported inside the provider that needs them.

    model = models.get({"provider": "scripted", "id": "scripted-v1"})
    models.preflight(cfg)   # raises AblateError with one line naming what is missing
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from ablate.models._protocol import (STOP_REASONS, TOKEN_ESTIMATE, FailedAttempt, Message, Model, Response, ToolCall,
                                     ToolSpec, Usage)
from ablate.models._recorder import Recorder
from ablate.models._retry import CallCut, ProviderError, ProviderOutage, deadline

# provider name -> "module:Class"; each class has from_config(cfg) and preflight(cfg). The scripted
# policy lives beside the agents (harnesses/scripted), loaded by name only when a config asks for it.
PROVIDERS: dict[str, str] = {
    "anthropic": "ablate.models._anthropic:AnthropicModel",
    "openai": "ablate.models._openai:OpenAIModel",
    "scripted": "ablate.harnesses.scripted:ScriptedModel",
    "replay": "ablate.models._replay:ReplayModel",
}


def _provider_class(cfg: Mapping[str, Any]):
    name = cfg.get("provider")
    if name not in PROVIDERS:
        raise AblateError(f"unknown model provider {name!r}; valid providers: {', '.join(PROVIDERS)}")
    module, cls = PROVIDERS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def get(cfg: Mapping[str, Any]) -> Model:
    """Build the model a config names (``cfg.provider`` picks the provider)."""
    return _provider_class(cfg).from_config(cfg)


def preflight(cfg: Mapping[str, Any]) -> None:
    """Check before any trial starts that the model can be reached (key, network, source)."""
    _provider_class(cfg).preflight(cfg)


__all__ = ["PROVIDERS", "STOP_REASONS", "TOKEN_ESTIMATE", "CallCut", "FailedAttempt", "Message", "Model",
           "ProviderError", "ProviderOutage", "Recorder", "Response", "ToolCall", "ToolSpec", "Usage", "deadline",
           "get", "preflight"]
