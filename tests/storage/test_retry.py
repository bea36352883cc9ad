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


class FakeClock:
    """A clock that the fake sleep and each attempt move forward."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_ends_retries_before_max_attempts() -> None:
    clock = FakeClock()
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.now += seconds

    def fn() -> str:
        clock.now += 4.0  # each attempt stalls until its own timeout
        raise TransientStorageError("s3://b/k too slow", bucket="b", key="k")

    policy = RetryPolicy(
        max_attempts=50, base=1.0, cap=1.0, sleep=sleep, random=lambda: 1.0, budget=10.0, clock=clock
    )
    with pytest.raises(TransientStorageError) as info:
        policy.call(fn)
    assert info.value.details["attempts"] == 2  # 4 + 1 + 4 = 9 s; a third try would start past 10 s
    assert "s3://b/k" in str(info.value) and "s3.total_timeout" in str(info.value)
    assert slept == [1.0]


def test_a_backoff_that_would_cross_the_deadline_gives_up_instead_of_sleeping(fake_sleep) -> None:
    clock = FakeClock()
    policy = RetryPolicy(
        max_attempts=5, base=5.0, cap=5.0, sleep=fake_sleep, random=lambda: 1.0, budget=3.0, clock=clock
    )
    fn = failing(10)
    with pytest.raises(TransientStorageError):
        policy.call(fn)
    assert len(fn.calls) == 1 and fake_sleep.slept == []


def test_remaining_is_the_budget_left_inside_a_call_only() -> None:
    from datahub.storage.retry import remaining

    seen: list[float | None] = []
    assert remaining() is None
    RetryPolicy(budget=30.0).call(lambda: seen.append(remaining()))
    RetryPolicy().call(lambda: seen.append(remaining()))
    assert seen[0] is not None and 0 < seen[0] <= 30.0 and seen[1] is None
    assert remaining() is None
