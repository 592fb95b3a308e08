"""The agent loop shared by every harness: ask the model, run its tool calls, repeat.

Budgets are checked before every model call, so no arm can overspend; the first limit reached
ends the trial and is recorded as ``end_reason``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ablate.errors import AblateError
from ablate.models import Message, Model, ToolSpec, Usage
from ablate.sandbox import Tool, ToolResult
from harnesses._task import Budget

# end_reason values: "submitted", a budget name ("turns", "tokens", "cost_usd", "wall_s",
# "tool_s", "gpu_s"), "model_stopped" (answered without a tool call, repeatedly), "refusal",
# "context_exceeded", "max_tokens", "model_error".
NUDGE = "Continue with the task using the tools. Call `submit` when kernel.py is final."
MAX_NUDGES = 2


@dataclass
class AgentResult:
    messages: list[Message]
    end_reason: str
    turns: int = 0
    usage: Usage = field(default_factory=Usage)
    wall_s: float = 0.0
    tool_s: float = 0.0
    gpu_s: float = 0.0
    submitted: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)  # mechanism events: phases, reviews

    def summary(self) -> dict[str, Any]:
        return {
            "end_reason": self.end_reason, "turns": self.turns, "usage": self.usage.to_dict(),
            "wall_s": round(self.wall_s, 3), "tool_s": round(self.tool_s, 3), "gpu_s": round(self.gpu_s, 3),
            "submitted": self.submitted, "events": self.events,
        }


@dataclass
class LoopState:
    """What mechanisms see when they are consulted (e.g. before a submit is accepted)."""

    model: Model
    system: str
    messages: list[Message]
    result: AgentResult
    budget: Budget
    started: float
    last_usage: Usage | None = None

    def charge(self, usage: Usage) -> None:
        """Count a mechanism's own model call (a reviewer's) against the trial's budget."""
        self.result.usage = self.result.usage + usage


def _exhausted(state: LoopState, specs: list[ToolSpec]) -> str | None:
    b, r = state.budget, state.result
    if r.turns >= b.turns:
        return "turns"
    if b.tokens is not None:
        # The next call re-reads the context (at least what the last call read and wrote) and writes about
        # as much as the last call did: refuse it if that would cross the limit.
        last = state.last_usage
        next_call = (last.total_tokens + last.output_tokens) if last else sum(len(m.content) for m in state.messages) // 3
        if r.usage.total_tokens + next_call > b.tokens:
            return "tokens"
    if b.cost_usd is not None:
        if r.usage.cost_usd + state.model.max_cost_of_next_call(state.system, state.messages, specs) > b.cost_usd:
            return "cost_usd"
    if b.wall_s is not None and time.monotonic() - state.started >= b.wall_s:
        return "wall_s"
    if b.tool_s is not None and r.tool_s >= b.tool_s:
        return "tool_s"
    if b.gpu_s is not None and r.gpu_s >= b.gpu_s:
        return "gpu_s"
    return None


def run_loop(model: Model, system: str, prompt: str, tools: dict[str, Tool], budget: Budget,
             before_submit=(), progress=None) -> AgentResult:
    """Run until submit or a budget ends it. ``before_submit`` are callables(LoopState) -> str|None:
    a string defers the submit and is returned to the agent as the submit tool's result."""
    specs = [t.spec for t in tools.values()]
    messages = [Message(role="user", content=prompt)]
    result = AgentResult(messages=messages, end_reason="")
    state = LoopState(model, system, messages, result, budget, time.monotonic())
    nudges = 0
    while not result.end_reason:
        limit = _exhausted(state, specs)
        if limit:
            result.end_reason = limit
            break
        try:
            response = model.generate(system, messages, specs)
        except AblateError:
            raise  # the user must act (bad key, diverged replay): stop the run, say why
        except Exception as e:  # noqa: BLE001 - retries are the provider's; record and judge what exists
            result.end_reason = "model_error"
            result.events.append({"event": "model_error", "error": f"{type(e).__name__}: {e}"[:500]})
            break
        result.turns += 1
        result.usage = result.usage + response.usage
        state.last_usage = response.usage
        messages.append(response.as_message())
        if progress:
            progress(result)
        if response.stop_reason in ("refusal", "context_exceeded"):
            result.end_reason = response.stop_reason
            break
        if not response.tool_calls:
            if response.stop_reason == "pause":
                continue  # the provider paused a long turn: send it back as it is to resume
            nudges += 1
            if nudges > MAX_NUDGES:
                result.end_reason = "model_stopped" if response.stop_reason != "max_tokens" else "max_tokens"
                break
            messages.append(Message(role="user", content=NUDGE))
            continue
        nudges = 0
        for call in response.tool_calls:
            tool_result = _run_tool(tools, call)
            result.tool_s += tool_result.seconds
            result.gpu_s += tool_result.gpu_seconds
            if tool_result.submitted:
                deferral = next((msg for check in before_submit if (msg := check(state))), None)
                if deferral:
                    tool_result = ToolResult(deferral, is_error=True)
                else:
                    result.submitted = True
                    result.end_reason = "submitted"
            messages.append(Message(role="tool", content=tool_result.content, tool_call_id=call.id,
                                    is_error=tool_result.is_error))
    result.wall_s = time.monotonic() - state.started
    return result


def _run_tool(tools: dict[str, Tool], call) -> ToolResult:
    if call.parse_error:
        return ToolResult(f"invalid arguments for {call.name}: {call.parse_error}", is_error=True)
    tool = tools.get(call.name)
    if tool is None:
        return ToolResult(f"unknown tool {call.name!r}; available: {', '.join(tools)}", is_error=True)
    start = time.monotonic()
    try:
        out = tool.run(call.arguments)
    except (KeyError, TypeError, ValueError) as e:  # missing or mistyped arguments from the model
        return ToolResult(f"{call.name}: bad arguments: {e}", is_error=True, seconds=time.monotonic() - start)
    if not out.seconds:
        out.seconds = time.monotonic() - start
    return out
