"""The agent loop shared by every harness: ask the model, run its tool calls, repeat.

One budget for everything a trial spends. Every model call, the agent's and any mechanism's
(a reviewer's), goes through ``LoopState.call``: the same check before the call (turns, tokens,
cost, wall, tool and GPU time) and the same count after it. Every tool's seconds, and its GPU
seconds, count toward ``tool_s`` and ``gpu_s``, whoever owns the tool. The first limit reached
ends the trial and is recorded as ``end_reason``; ``spent`` says what each owner used.

A model call ends with the wall budget (ablate.models.deadline): a reply still arriving then is
cut, paid from the budget, and the trial ends on ``wall_s``. What the infrastructure loses (a
failed request retried by the provider) is not the agent's: it is paid outside the budget, and a
call that finds no reply at all raises ProviderOutage, which ends the attempt, not the trial.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ablate import models
from ablate.errors import AblateError
from ablate.models import Message, Model, ToolSpec, Usage
from ablate.sandbox import Tool, ToolResult
from ablate.harnesses._task import Budget

# end_reason values: "submitted", a budget name ("turns", "tokens", "cost_usd", "wall_s",
# "tool_s", "gpu_s"), "model_stopped" (answered without a tool call, repeatedly), "refusal",
# "context_exceeded", "max_tokens", "model_error".
NUDGE = "Continue with the task using the tools. Call `submit` when kernel.py is final."
MAX_NUDGES = 2
AGENT = "agent"  # the owner name of the agent's own model calls; tools are owned by "core" or a mechanism


class BudgetExhausted(Exception):
    """A limit would be crossed by the next model call: the trial ends, recorded as ``limit``."""

    def __init__(self, limit: str):
        super().__init__(limit)
        self.limit = limit


@dataclass
class Spend:
    """What one owner (the agent, the core tools, a mechanism) used of the trial's budget."""

    model_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    tool_s: float = 0.0
    gpu_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


@dataclass
class AgentResult:
    messages: list[Message]
    end_reason: str
    turns: int = 0  # model calls of every owner: the agent's and its mechanisms'
    usage: Usage = field(default_factory=Usage)
    wall_s: float = 0.0
    tool_s: float = 0.0
    gpu_s: float = 0.0
    submitted: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)  # model errors
    spent: dict[str, Spend] = field(default_factory=dict)  # owner -> what it used
    mechanisms: dict[str, dict[str, Any]] = field(default_factory=dict)  # mechanism -> its use (see Mechanism.use)

    def summary(self) -> dict[str, Any]:
        return {
            "end_reason": self.end_reason, "turns": self.turns, "usage": self.usage.to_dict(),
            "wall_s": round(self.wall_s, 3), "tool_s": round(self.tool_s, 3), "gpu_s": round(self.gpu_s, 3),
            "submitted": self.submitted, "events": self.events,
            "spent": {owner: s.to_dict() for owner, s in self.spent.items()},
            "mechanisms": self.mechanisms,
        }


@dataclass
class LoopState:
    """The running trial as mechanisms see it (e.g. a reviewer before a submit is accepted)."""

    model: Model
    system: str
    messages: list[Message]
    result: AgentResult
    budget: Budget
    started: float
    last_usage: dict[str, Usage] = field(default_factory=dict)  # owner -> its last call's usage

    def spend(self, owner: str) -> Spend:
        return self.result.spent.setdefault(owner, Spend())

    def exhausted(self, model: Model, system: str, messages: list[Message], specs: list[ToolSpec],
                  owner: str = AGENT) -> str | None:
        """The budget a call would cross, or None. Checked before every model call of every owner."""
        b, r = self.budget, self.result
        if r.turns >= b.turns:
            return "turns"
        if b.tokens is not None and r.usage.total_tokens + self._next_tokens(system, messages, owner) > b.tokens:
            return "tokens"
        if b.cost_usd is not None and r.usage.cost_usd + model.max_cost_of_next_call(system, messages, specs) > b.cost_usd:
            return "cost_usd"
        if b.wall_s is not None and time.monotonic() - self.started >= b.wall_s:
            return "wall_s"
        if b.tool_s is not None and r.tool_s >= b.tool_s:
            return "tool_s"
        if b.gpu_s is not None and r.gpu_s >= b.gpu_s:
            return "gpu_s"
        return None

    def _next_tokens(self, system: str, messages: list[Message], owner: str) -> int:
        last = self.last_usage.get(owner)
        if owner == AGENT and last is not None:
            # The agent's next call re-reads its context (at least what the last call read and
            # wrote) and writes about as much as the last call did.
            return last.total_tokens + last.output_tokens
        # A fresh context (a reviewer's): about a token per three characters, plus a reply as long as the last.
        prompt = (len(system) + sum(len(m.content) for m in messages)) // 3
        return prompt + (last.output_tokens if last else 0)

    def call(self, model: Model, system: str, messages: list[Message], specs: list[ToolSpec],
             owner: str = AGENT):
        """One model call, budget-checked and counted for ``owner``; raises BudgetExhausted."""
        limit = self.exhausted(model, system, messages, specs, owner)
        if limit:
            raise BudgetExhausted(limit)
        wall_end = None if self.budget.wall_s is None else self.started + self.budget.wall_s
        try:
            with models.deadline(wall_end):
                response = model.generate(system, messages, specs)
        except models.CallCut as e:  # the wall budget ran out mid-reply: the agent's call, paid
            self._count(owner, e.usage)
            raise BudgetExhausted("wall_s") from e
        self._count(owner, response.usage)
        return response

    def _count(self, owner: str, usage: Usage) -> None:
        self.result.turns += 1
        self.result.usage = self.result.usage + usage
        self.last_usage[owner] = usage
        s = self.spend(owner)
        s.model_calls += 1
        s.tokens += usage.total_tokens
        s.cost_usd += usage.cost_usd

    def charge_tool(self, owner: str, out: ToolResult) -> None:
        self.result.tool_s += out.seconds
        self.result.gpu_s += out.gpu_seconds
        s = self.spend(owner)
        s.tool_calls += 1
        s.tool_s += out.seconds
        s.gpu_s += out.gpu_seconds


def run_loop(model: Model, system: str, prompt: str, tools: dict[str, Tool], budget: Budget,
             owners: dict[str, str] | None = None, before_submit=(), progress=None, after_tool=None) -> AgentResult:
    """Run until submit or a budget ends it. ``owners`` maps a tool to who is charged for it
    (default "core"). ``before_submit``: callables(LoopState) -> str | None, in order; a string
    defers the submit and is returned to the agent as the submit tool's result. ``after_tool``:
    called with (LoopState, tool name) after every tool call, of every arm alike (the trial's
    snapshots of kernel.py, ablate.snapshots)."""
    owners = owners or {}
    specs = [t.spec for t in tools.values()]
    messages = [Message(role="user", content=prompt)]
    result = AgentResult(messages=messages, end_reason="")
    state = LoopState(model, system, messages, result, budget, time.monotonic())
    nudges = 0
    while not result.end_reason:
        try:
            response = state.call(model, system, messages, specs)
        except BudgetExhausted as e:
            result.end_reason = e.limit
            break
        except AblateError:
            raise  # the user must act (bad key, diverged replay): stop the run, say why
        except Exception as e:  # noqa: BLE001 - retries are the provider's; record and judge what exists
            _model_error(result, e)
            break
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
            if result.end_reason:  # a call after the submit in the same turn: the trial is over
                messages.append(Message(role="tool", content="not run: the trial has ended", tool_call_id=call.id,
                                        is_error=True))
                continue
            tool_result = _run_tool(tools, call)
            state.charge_tool(owners.get(call.name, "core"), tool_result)
            if after_tool:
                after_tool(state, call.name)
            if tool_result.submitted:
                try:
                    deferral = next((msg for check in before_submit if (msg := check(state))), None)
                except BudgetExhausted as e:
                    result.end_reason = e.limit  # a mechanism's own call would overspend: the trial ends here
                    deferral = None
                except AblateError:
                    raise
                except Exception as e:  # noqa: BLE001 - a mechanism's model call failed: as the agent's would
                    _model_error(result, e)
                    deferral = None
                if deferral:
                    tool_result = ToolResult(deferral, is_error=True)
                elif not result.end_reason:
                    result.submitted = True
                    result.end_reason = "submitted"
            messages.append(Message(role="tool", content=tool_result.content, tool_call_id=call.id,
                                    is_error=tool_result.is_error))
    result.wall_s = time.monotonic() - state.started
    return result


def _model_error(result: AgentResult, e: Exception) -> None:
    result.end_reason = "model_error"
    result.events.append({"event": "model_error", "error": f"{type(e).__name__}: {e}"[:500]})


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
