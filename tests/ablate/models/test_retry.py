"""The retry policy on its own: which errors are retried, how long it waits, when it gives up."""
from __future__ import annotations

import pytest

from ablate.errors import AblateError
from ablate.models._retry import ProviderError, RetryPolicy, is_retryable, with_retries


class StatusError(Exception):
    def __init__(self, status, retry_after=None):
        super().__init__(f"status {status}")
        self.status_code = status
        self.response = type("R", (), {"headers": {"retry-after": retry_after} if retry_after else {}})()


class Refused(Exception):
    pass


@pytest.mark.parametrize("status,retried", [(408, True), (409, True), (429, True), (500, True), (503, True),
                                            (529, True), (400, False), (401, False), (403, False), (404, False)])
def test_which_statuses_are_retried(status, retried):
    assert is_retryable(StatusError(status), (Refused,)) is retried


def test_connection_errors_are_retried():
    assert is_retryable(Refused(), (Refused,)) and not is_retryable(ValueError(), (Refused,))


def test_backoff_doubles_is_capped_and_honours_retry_after():
    p = RetryPolicy(max_retries=5, base_delay_s=1.0, max_delay_s=10.0)
    for retry, top in [(0, 1.0), (1, 2.0), (2, 4.0), (5, 10.0)]:
        assert top / 2 <= p.delay(retry, None) <= top
    assert p.delay(0, 7.0) == 7.0 and p.delay(0, 99.0) == 10.0  # the hint wins, within the cap


def test_attempts_are_counted_and_sleeps_follow_the_policy():
    errors = [StatusError(529), StatusError(429, "3"), None]
    slept = []

    def call(attempt):
        e = errors.pop(0)
        if e:
            raise e
        return "ok"

    policy = RetryPolicy(max_retries=4, base_delay_s=0.5, max_delay_s=60)
    assert with_retries(call, policy, lambda e: is_retryable(e, ()), str, "t", sleep=slept.append) == ("ok", 3)
    assert 0.25 <= slept[0] <= 0.5 and slept[1] == 3.0


def test_non_retryable_error_is_raised_at_once():
    calls = []

    def call(attempt):
        calls.append(1)
        raise StatusError(401)

    with pytest.raises(StatusError):
        with_retries(call, RetryPolicy(3, 0, 0), lambda e: is_retryable(e, ()), str, "t", sleep=lambda s: None)
    assert len(calls) == 1


def test_giving_up_is_a_provider_error_naming_the_attempts():
    def call(attempt):
        raise StatusError(529)

    with pytest.raises(ProviderError, match=r"^t: gave up after 3 attempts; last error: status 529$") as e:
        with_retries(call, RetryPolicy(2, 0, 0), lambda e: is_retryable(e, ()), str, "t", sleep=lambda s: None)
    assert isinstance(e.value, AblateError)


def test_policy_from_config_reads_nulls_as_defaults_and_rejects_negatives():
    assert RetryPolicy.from_config({"max_retries": None, "retry_base_s": 0.01}) == RetryPolicy(6, 0.01, 60.0)
    with pytest.raises(AblateError, match=">= 0"):
        RetryPolicy.from_config({"max_retries": -1})
