"""Retries with exponential backoff for provider calls, counted, logged and paid for.

The SDKs' own retries are switched off (max_retries=0) so every attempt passes through here:
the record can say how many attempts a call took, what each failed one used, and the log says
why each retry happened.

What is whose fault. A reply that never arrives whole is the infrastructure's: an HTTP error
worth a retry (429/529/5xx, timeouts, a lost connection), a stream that stalls (no content for
``timeout_s``, keep-alive pings or not), a stream that ends before the API's end marker, a reply
that is not the API's JSON. Each is retried; when the retries run out, or the trial's wall budget
ends before the next could start, the call raises ProviderOutage: the trial attempt is kept as an
infrastructure failure and the runner tries the trial again. A reply cut off because the trial's
wall budget ran out while it streamed (``deadline``) is the agent's: CallCut, and the trial ends
on its wall budget. A malformed tool call in a whole reply is the model's: the loop hands the
parse error back to it.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ablate.errors import AblateError
from ablate.models import _pricing
from ablate.models._protocol import FailedAttempt, Message, Response, ToolSpec, Usage

log = logging.getLogger("ablate.models")
T = TypeVar("T")

# HTTP statuses worth another attempt: timeout, conflict, rate limit, server errors (529 overloaded).
RETRY_STATUS = {408, 409, 429}


class ProviderError(AblateError):
    """A model API call that failed for good: bad key, rejected request, retries exhausted.
    ``failed_attempts``: the requests it made that brought no reply, with what each used."""

    def __init__(self, message: str, failed_attempts: list[FailedAttempt] | None = None):
        super().__init__(message)
        self.failed_attempts = list(failed_attempts or [])


class ProviderOutage(ProviderError):
    """Retries exhausted on errors that are the provider's (429/529/5xx, timeouts, connection,
    stalled or dropped streams, replies that are not the API's), or the trial's wall budget ran
    out while retrying: an infrastructure failure, so the runner retries the trial rather than
    stopping the study."""


class ReplyFailure(Exception):
    """A reply that did not arrive whole: the infrastructure's fault, retried."""


class StreamStalled(ReplyFailure):
    """No content for timeout_s (keep-alive pings or comments do not count)."""


class StreamDropped(ReplyFailure):
    """The stream ended before the API's end marker (message_stop; finish_reason and [DONE])."""


class NotAReply(ReplyFailure):
    """A 2xx answer that is not the API's: an HTML page, a body that is not JSON, a JSON object
    of another shape."""


class CallCut(Exception):
    """The trial's wall budget ran out while a reply was arriving: the agent's time, not an
    outage. ``usage``: what the cut request used (the agent's budget pays it)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.usage = Usage()
        self.failed_attempts: list[FailedAttempt] = []


_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("ablate_model_deadline", default=None)


@contextlib.contextmanager
def deadline(at: float | None) -> Iterator[None]:
    """Model calls made inside end by ``at`` (time.monotonic() seconds; None: no limit): a reply
    still arriving then is cut (CallCut), and no retry starts after it. The agent loop sets it to
    the end of the trial's wall budget."""
    token = _DEADLINE.set(at)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def current_deadline() -> float | None:
    return _DEADLINE.get()


def ours(e: BaseException) -> BaseException | None:
    """The ReplyFailure or CallCut behind ``e`` (an SDK wraps what its HTTP client raised in its
    own connection error), or None."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, (ReplyFailure, CallCut)):
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


@dataclass
class Attempt:
    """One request of a call. The provider points ``paid`` at what the request has used so far
    (a stream's usage as it arrives), so a request that fails midway is still accounted."""

    number: int
    paid: Callable[[], Usage] = field(default=Usage)


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


def with_retries(call: Callable[[Attempt], T], policy: RetryPolicy, retryable: Callable[[BaseException], bool],
                 describe: Callable[[BaseException], str], label: str,
                 sleep: Callable[[float], None] = time.sleep, deadline: float | None = None,
                 failed: list[FailedAttempt] | None = None) -> tuple[T, int]:
    """Run ``call(attempt)``; retry what ``retryable`` accepts (and every ReplyFailure). Returns
    (result, attempts made); ``failed`` receives each failed request with what it used.

    A non-retryable error is re-raised as is (the provider explains it). Running out of retries,
    or of time before ``deadline`` for the next one, raises ProviderOutage naming the attempts and
    the last error. A CallCut (the deadline passed mid-reply) is raised as is on a first attempt
    (the agent's time ran out), as ProviderOutage after failed ones (the outage took the time).
    """
    failed = [] if failed is None else failed
    for n in range(policy.max_retries + 1):
        attempt = Attempt(n + 1)
        start = time.monotonic()
        try:
            return call(attempt), n + 1
        except Exception as e:  # noqa: BLE001 - classified just below
            inner = ours(e)
            if isinstance(inner, CallCut):
                if not failed:
                    inner.usage = attempt.paid()
                    inner.usage.calls = 1  # the agent's call, though it brought no whole reply
                    inner.failed_attempts = [FailedAttempt(str(inner), inner.usage, time.monotonic() - start, "agent")]
                    raise inner from None
                failed.append(FailedAttempt(describe(inner), attempt.paid(), time.monotonic() - start))
                raise ProviderOutage(f"{label}: gave up after {n + 1} attempts: the trial's wall budget ran out while "
                                     f"retrying; last error: {failed[-2].error}", failed) from e
            if not (isinstance(inner, ReplyFailure) or retryable(e)):
                raise
            failed.append(FailedAttempt(describe(inner or e), attempt.paid(), time.monotonic() - start))
            if n == policy.max_retries:
                raise ProviderOutage(f"{label}: gave up after {n + 1} attempts; last error: {describe(inner or e)}",
                                     failed) from e
            d = policy.delay(n, _retry_after(e))
            if deadline is not None and time.monotonic() + d >= deadline:
                raise ProviderOutage(f"{label}: gave up after {n + 1} attempts: the trial's wall budget ends before "
                                     f"another could start; last error: {describe(inner or e)}", failed) from e
            log.warning("%s: %s; retry %d/%d in %.2fs", label, describe(inner or e), n + 1, policy.max_retries, d)
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

    def _send(self, call: Callable[[Attempt], Response], retryable: Callable[[BaseException], bool],
              describe: Callable[[BaseException], str], label: str,
              too_long: Callable[[BaseException], bool]) -> Response:
        """call(attempt)'s Response, retried (its failed requests in ``failed_attempts``), or the
        context_exceeded Response when too_long(the refusal)."""
        failed: list[FailedAttempt] = []
        try:
            result, attempts = with_retries(call, self.retry, retryable, describe, label,
                                            deadline=current_deadline(), failed=failed)
        except (ProviderOutage, CallCut):
            self.attempts += max(len(failed), 1)
            raise
        except self._sdk.APIStatusError as e:
            self.attempts += len(failed) + 1
            if too_long(e):
                log.warning("%s: %s", label, describe(e))
                return Response("", [], Usage(calls=1), "context_exceeded", failed_attempts=failed)
            raise ProviderError(self._explain(e), failed) from e
        except Exception as e:
            self.attempts += len(failed) + 1
            if failed:  # what the retries before it used stays on the record
                e.failed_attempts = failed  # type: ignore[attr-defined]
            raise
        self.attempts += attempts
        result.failed_attempts = failed
        return result

    def _cost(self, usage: Usage) -> Usage:
        usage.cost_usd = _pricing.cost_usd(self.price, usage)
        return usage

    def max_cost_of_next_call(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> float:
        return _pricing.max_cost(self.price, self.max_tokens, system, messages, tools)
