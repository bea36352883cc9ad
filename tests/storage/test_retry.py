"""The backoff schedule and retry rules, with injected sleep and random."""

from __future__ import annotations

import pytest

from datahub.errors import ObjectNotFound, TransientStorageError
from datahub.storage.retry import RetryPolicy


def failing(times: int, error: Exception | None = None):
    calls = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error or TransientStorageError("s3://b/k unavailable", bucket="b", key="k")
        return "ok"

    fn.calls = calls
    return fn


def test_backoff_doubles_from_base_up_to_the_cap() -> None:
    policy = RetryPolicy(max_attempts=8, base=0.1, cap=1.0, random=lambda: 1.0)
    assert [policy.backoff(n) for n in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


def test_full_jitter_scales_the_whole_delay() -> None:
    draws = iter([0.0, 0.5, 0.25])
    policy = RetryPolicy(base=0.2, cap=10.0, random=lambda: next(draws))
    assert [policy.backoff(n) for n in range(3)] == pytest.approx([0.0, 0.2, 0.2])


def test_call_retries_transient_errors_and_sleeps_between(fake_sleep) -> None:
    policy = RetryPolicy(max_attempts=4, base=0.5, cap=30, sleep=fake_sleep, random=lambda: 1.0)
    fn = failing(3)
    assert policy.call(fn) == "ok"
    assert len(fn.calls) == 4 and fake_sleep.slept == [0.5, 1.0, 2.0]


def test_call_gives_up_after_max_attempts(fake_sleep) -> None:
    retried = []
    policy = RetryPolicy(max_attempts=3, sleep=fake_sleep, random=lambda: 0.5)
    fn = failing(10)
    with pytest.raises(TransientStorageError, match="gave up after 3 attempts") as err:
        policy.call(fn, on_retry=lambda n, exc: retried.append(n))
    assert len(fn.calls) == 3 and len(fake_sleep.slept) == 2 and retried == [0, 1]
    assert err.value.details["attempts"] == 3 and "s3://b/k" in str(err.value)


def test_other_errors_are_never_retried(fake_sleep) -> None:
    policy = RetryPolicy(max_attempts=5, sleep=fake_sleep)
    fn = failing(1, ObjectNotFound("object 'k' not found"))
    with pytest.raises(ObjectNotFound):
        policy.call(fn)
    assert len(fn.calls) == 1 and fake_sleep.slept == []


def test_one_attempt_means_no_retry(fake_sleep) -> None:
    policy = RetryPolicy(max_attempts=0, sleep=fake_sleep)  # clamped to 1
    fn = failing(1)
    with pytest.raises(TransientStorageError) as err:
        policy.call(fn)
    assert len(fn.calls) == 1 and "gave up" not in err.value.message
