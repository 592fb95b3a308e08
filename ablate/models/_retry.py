"""Retries with exponential backoff for provider calls, counted and logged.

The SDKs' own retries are switched off (max_retries=0) so every attempt passes through here:
the record can say how many attempts a call took, and the log says why each retry happened.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ablate.errors import AblateError
from ablate.models import _pricing
from ablate.models._protocol import Message, Response, ToolSpec, Usage

log = logging.getLogger("ablate.models")
T = TypeVar("T")

# HTTP statuses worth another attempt: timeout, conflict, rate limit, server errors (529 overloaded).
RETRY_STATUS = {408, 409, 429}


class ProviderError(AblateError):
    """A model API call that failed for good: bad key, rejected request, retries exhausted."""


class ProviderOutage(ProviderError):
    """Retries exhausted on errors that are the provider's (429/529/5xx, timeouts, connection):
    an infrastructure failure, so the runner retries the trial rather than stopping the study."""


@dataclass
class RetryPolicy:
    max_retries: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "RetryPolicy":
        def get(key: str, default: float) -> Any:
            return default if cfg.get(key) is None else cfg[key]

        p = cls(int(get("max_retries", cls.max_retries)), float(get("retry_base_s", cls.base_delay_s)),
                float(get("retry_max_s", cls.max_delay_s)))
        if p.max_retries < 0 or p.base_delay_s < 0 or p.max_delay_s < 0:
            raise AblateError(f"model retry settings must be >= 0, got {p}")
        return p

    def delay(self, retry: int, retry_after: float | None) -> float:
        # Full jitter in [0.5, 1] x the exponential step keeps parallel trials from retrying in lockstep.
        d = min(self.max_delay_s, self.base_delay_s * 2**retry) * random.uniform(0.5, 1.0)
        if retry_after is not None:  # the server's own hint wins when it asks for longer
            d = max(d, min(retry_after, self.max_delay_s))
        return d


def status_of(e: BaseException) -> int | None:
    return getattr(e, "status_code", None)


def is_retryable(e: BaseException, connection_errors: tuple[type[BaseException], ...]) -> bool:
    """Connection errors and timeouts (the SDK's connection error classes) and 408/409/429/5xx."""
    if isinstance(e, connection_errors):
        return True
    s = status_of(e)
    return s is not None and (s in RETRY_STATUS or s >= 500)


def _retry_after(e: BaseException) -> float | None:
    response = getattr(e, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare; the exponential step is used instead


def with_retries(call: Callable[[], T], policy: RetryPolicy, retryable: Callable[[BaseException], bool],
                 describe: Callable[[BaseException], str], label: str,
                 sleep: Callable[[float], None] = time.sleep) -> tuple[T, int]:
    """Run ``call``; retry what ``retryable`` accepts. Returns (result, attempts made).

    A non-retryable error is re-raised as is (the provider explains it); running out of
    retries raises ProviderError naming the attempts and the last error.
    """
    for attempt in range(policy.max_retries + 1):
        try:
            return call(), attempt + 1
        except Exception as e:  # noqa: BLE001 - classified just below
            if not retryable(e):
                raise
            if attempt == policy.max_retries:
                raise ProviderOutage(f"{label}: gave up after {attempt + 1} attempts; last error: {describe(e)}") from e
            d = policy.delay(attempt, _retry_after(e))
            log.warning("%s: %s; retry %d/%d in %.2fs", label, describe(e), attempt + 1, policy.max_retries, d)
            sleep(d)
    raise AssertionError("unreachable")


class SDKModel:
    """What the models behind a provider SDK share: calls retried and their attempts counted,
    a prompt past the context window ending the trial as "context_exceeded", any other refusal
    raised as ProviderError in the provider's own words (`_explain`)."""

    id: str
    max_tokens: int
    price: Any
    retry: RetryPolicy
    attempts: int

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]):
        return cls(cfg)

    def _explain(self, e: BaseException) -> str:
        raise NotImplementedError

    def _send(self, call: Callable[[], T], retryable: Callable[[BaseException], bool],
              describe: Callable[[BaseException], str], label: str,
              too_long: Callable[[BaseException], bool]) -> T | Response:
        """call()'s result, or the context_exceeded Response when too_long(the refusal)."""
        try:
            result, attempts = with_retries(call, self.retry, retryable, describe, label)
        except ProviderOutage:
            self.attempts += self.retry.max_retries + 1
            raise
        except self._sdk.APIStatusError as e:
            self.attempts += 1
            if too_long(e):
                log.warning("%s: %s", label, describe(e))
                return Response("", [], Usage(calls=1), "context_exceeded")
            raise ProviderError(self._explain(e)) from e
        self.attempts += attempts
        return result

    def max_cost_of_next_call(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> float:
        return _pricing.max_cost(self.price, self.max_tokens, system, messages, tools)
