"""The provider-neutral model protocol: messages and tool specs in; text, tool calls, usage out.

Every provider (anthropic, openai-compatible, scripted, replay) speaks this and only this, so a
harness never sees a provider SDK. Provider-specific content the provider must get back
verbatim (Anthropic thinking blocks with signatures) rides along in ``Message.raw``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    # Set when the model produced arguments that are not a JSON object; the loop answers the
    # model with this error as the tool result instead of running the tool.
    parse_error: str | None = None


@dataclass
class Message:
    """One conversation turn.

    role "user": ``content`` is the text. role "assistant": ``content`` (text) and
    ``tool_calls``. role "tool": the result of one tool call (``tool_call_id``, ``content``,
    ``is_error``).
    """

    role: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    is_error: bool = False
    raw: Any = None  # provider's own content blocks, passed back unmodified

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Message":
        d = dict(d)
        d["tool_calls"] = [ToolCall(**c) for c in d.get("tool_calls", [])]
        return cls(**d)


# How tokens are counted where a server reports none (an OpenAI-compatible server without usage,
# a reply cut off before its usage arrived). No tokenizer of the served model is at hand offline
# (tiktoken fetches its BPE files from the network on first use, and is OpenAI's, not the served
# model's), so the count is an estimate that errs high: BPE tokenizers give code and English text
# 3.5-4.5 bytes a token, so budgets bind early rather than late.
TOKEN_ESTIMATE = "ceil(UTF-8 bytes / 3)"


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` by TOKEN_ESTIMATE."""
    return -(-len(text.encode("utf-8")) // 3)


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    estimated_tokens: int = 0  # how many of the tokens above are TOKEN_ESTIMATE's, not the server's

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)})

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self) | {"total_tokens": self.total_tokens}
        if self.estimated_tokens:
            out["estimated_by"] = TOKEN_ESTIMATE
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "Usage":
        """A usage as to_dict() wrote it (unknown keys ignored)."""
        d = d or {}
        return cls(**{f.name: type(f.default)(d.get(f.name) or 0) for f in dataclasses.fields(cls)})


@dataclass
class FailedAttempt:
    """One request of a model call that brought no reply (a stall, a dropped stream, a reply that
    is not the API's, a 529 ...): what went wrong, what it used as far as known, and who pays.
    ``charged_to``: "infrastructure" (outside the agent's budget), or "agent" (a reply cut off
    at the trial's wall budget: the agent's own time ran out)."""

    error: str
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0
    charged_to: str = "infrastructure"

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.error[:500], "usage": self.usage.to_dict(), "seconds": round(self.seconds, 3),
                "charged_to": self.charged_to}


# Normalised stop reasons. Providers map their own onto these; "end" means the model is done.
STOP_REASONS = ("end", "tool_use", "max_tokens", "pause", "refusal", "context_exceeded")


@dataclass
class Response:
    text: str
    tool_calls: list[ToolCall]
    usage: Usage
    stop_reason: str  # one of STOP_REASONS
    raw: Any = None  # provider content blocks for the assistant message (see Message.raw)
    failed_attempts: list[FailedAttempt] = field(default_factory=list)  # requests before the one that answered

    def as_message(self) -> Message:
        return Message(role="assistant", content=self.text, tool_calls=list(self.tool_calls), raw=self.raw)


@runtime_checkable
class Model(Protocol):
    """What a harness calls. ``id`` names the exact model for the record."""

    id: str

    def generate(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> Response: ...

    def max_cost_of_next_call(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> float:
        """Upper bound on the next call's cost in USD, so the loop can refuse a call that
        would overrun the cost budget before it is made. 0 for free models."""
        ...
