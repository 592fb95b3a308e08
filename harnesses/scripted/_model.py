"""The `scripted` model: a deterministic, non-LLM policy behind the model interface (the model
registry's "scripted" provider, ``+model=scripted``). The offline default and a control arm.

Policy "kernel-search" (_policy) plays the harness's tools; asked without tools (a review request)
it reviews for real (``review``); policy "actions" plays a fixed list of tool calls (for tests),
then submits. Its seed is ``seed`` in the model config, else the trial's seed, which the trial
passes as ``trial_seed``.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ablate.errors import AblateError
from ablate.harnesses.scripted._policy import next_call
from ablate.models import Message, Response, ToolCall, ToolSpec, Usage

POLICIES = ("kernel-search", "actions")


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


# -- the review a scripted reviewer gives ----------------------------------------------------
def review(request: str) -> str:
    """APPROVE, or REVISE with numbered objections: evidence on the exact file, masks, no reference call."""
    evidence = request.split("Evidence since kernel.py last changed:", 1)[-1].split("Objections from earlier", 1)[0]
    kernel = request.split("under review", 1)[-1].split("Evidence since", 1)[0]
    objections = []
    if "none: kernel.py was not tested" in evidence:
        objections.append("kernel.py was not tested after its last change: run the correctness check and the "
                          "timing on this exact file, then submit again.")
    if "from reference import" in kernel or "reference(" in kernel.split("def kernel", 1)[-1]:
        objections.append("kernel.py calls the reference instead of computing the operator itself.")
    if "tl.load" in kernel and "mask" not in kernel:
        objections.append("loads are not masked: rows whose length is not a multiple of the block read past the end.")
    if objections:
        return "REVISE\n" + "\n".join(f"{i}. {o}" for i, o in enumerate(objections, 1))
    return "APPROVE\nThe final kernel was tested after its last change; loads are masked and nothing calls the reference."


class ScriptedModel:
    def __init__(self, policy: str = "kernel-search", actions: list[dict[str, Any]] | None = None, seed: int = 0):
        self.policy = policy
        self.actions = list(actions or [])
        self.seed = int(seed)
        self.id = f"scripted-{policy}-v1"

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "ScriptedModel":
        cls.preflight(cfg)
        seed = cfg.get("seed") if cfg.get("seed") is not None else cfg.get("trial_seed")
        return cls(cfg.get("policy") or "kernel-search", [dict(a) for a in cfg.get("actions") or []], int(seed or 0))

    @classmethod
    def preflight(cls, cfg: Mapping[str, Any]) -> None:
        if (cfg.get("policy") or "kernel-search") not in POLICIES:
            raise AblateError(f"unknown scripted policy {cfg.get('policy')!r}; valid policies: {', '.join(POLICIES)}")

    def max_cost_of_next_call(self, system, messages, tools) -> float:
        return 0.0

    def generate(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> Response:
        if not tools:
            text, calls = review(messages[-1].content if messages else ""), []
        else:
            if self.policy == "actions":
                step = sum(1 for m in messages if m.role == "assistant" and m.tool_calls)
                text, call = self._next_action(step)
            else:
                text, call = next_call(system, messages, tools, self.seed)
            calls = [call] if call else []
        prompt_chars = len(system) + sum(len(m.content) for m in messages)
        usage = Usage(input_tokens=_tokens(" " * prompt_chars), output_tokens=_tokens(text + json.dumps([c.arguments for c in calls])), calls=1)
        return Response(text=text, tool_calls=calls, usage=usage, stop_reason="tool_use" if calls else "end")

    def _next_action(self, step: int) -> tuple[str, ToolCall | None]:
        if step < len(self.actions):
            a = self.actions[step]
            return f"action {step}", ToolCall(f"a{step}", a["tool"], dict(a.get("args", {})))
        if step == len(self.actions):
            return "submitting", ToolCall(f"a{step}", "submit", {})
        return "done", None
