"""Against the real Anthropic API (marked `api`: skipped without a key). A few cents per run."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ablate.models import Message, ToolSpec, get, preflight

CONF = Path(__file__).resolve().parents[3] / "conf" / "model"
pytestmark = [pytest.mark.api,
              pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="needs ANTHROPIC_API_KEY")]
TOOLS = [ToolSpec("bash", "Run a shell command and return its output.",
                  {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]})]


def model_cfg(name: str, **overrides) -> dict:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = OmegaConf.to_container(compose(config_name=name), resolve=True)
    return cfg | overrides


@pytest.mark.parametrize("name", ["fable-5.1", "fable-5.2", "claude-opus-5.5", "claude-sonnet-5.5", "claude-haiku-4.5"])
def test_preflight_accepts_every_shipped_claude_config(name):
    preflight(model_cfg(name))  # key accepted, id known, max_tokens within the model's limit


@pytest.mark.parametrize("name,overrides", [("claude-haiku-4.5", {"max_tokens": 2048, "thinking_budget": 1024}),
                                            ("fable-5.1", {"max_tokens": 4096, "effort": "low"})])
def test_tool_round_trip_with_thinking(name, overrides):
    model = get(model_cfg(name, **overrides))
    history = [Message("user", "Call the bash tool once with the command `echo 42`, then tell me what it printed.")]
    first = model.generate("You are terse.", history, TOOLS)
    assert first.stop_reason == "tool_use" and first.tool_calls[0].name == "bash"
    assert first.usage.cost_usd > 0 and first.usage.output_tokens > 0
    history += [first.as_message(), Message("tool", "42\n", tool_call_id=first.tool_calls[0].id)]
    second = model.generate("You are terse.", history, TOOLS)  # thinking blocks go back verbatim
    assert second.stop_reason == "end" and "42" in second.text
