"""What the origin remembers of a failed object (issue 23): genuine timeouts only, for a
fixed time after the failure, never renewed by callers who only met the memory, and
forgotten as soon as the same endpoint answers a request that began after the failure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from datahub.cache.stall_memory import StallMemory, endpoint_of
from datahub.errors import TransientStorageError

URL = "s3://bucket/img/a.jpg"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def timeout() -> TransientStorageError:
    return TransientStorageError(
        "S3 endpoint unreachable or too slow for s3://bucket/img/a.jpg", timed_out=True
    )


def remembered(memory: StallMemory, url: str = URL) -> bool:
    try:
        memory.check(url, "e1")
    except TransientStorageError as exc:
        assert exc.details["remembered"] is True
        return True
    return False


def test_a_timeout_is_remembered_for_a_fixed_time_after_it_happened() -> None:
    clock = Clock()
    memory = StallMemory(5.0, clock=clock)
    memory.failed(URL, "e1", timeout())
    clock.now += 4.9
    assert remembered(memory)
    clock.now += 0.1
    assert not remembered(memory)
    assert len(memory) == 0


def test_meeting_the_memory_never_renews_it() -> None:
    """The defect: each caller who met the memory stored it again with a fresh time, so a
    reader polling more often than the memory's length never saw the origin return."""
    clock = Clock()
    memory = StallMemory(5.0, clock=clock)
    memory.failed(URL, "e1", timeout())
    for _ in range(4):
        clock.now += 1.0
        with pytest.raises(TransientStorageError) as met:
            memory.check(URL, "e1")
        memory.failed(URL, "e1", met.value)  # as the origin's except clause used to do
    clock.now += 1.0
    assert not remembered(memory)


@pytest.mark.parametrize(
    "error",
    [
        TransientStorageError("connection refused"),
        TransientStorageError("connection reset by peer"),
        TransientStorageError("503 SlowDown", status=503, s3_code="SlowDown"),
        TransientStorageError("500", status=500),
        ValueError("not a storage error"),
    ],
)
def test_fast_failures_are_not_remembered(error: BaseException) -> None:
    memory = StallMemory(5.0, clock=Clock())
    memory.failed(URL, "e1", error)
    assert not remembered(memory)


def test_an_answer_from_the_same_endpoint_after_the_failure_forgets_it() -> None:
    clock = Clock()
    memory = StallMemory(5.0, clock=clock)
    memory.failed(URL, "e1", timeout())
    memory.answered("s3://bucket/other.jpg", started=clock.now - 1.0)  # began before: proves nothing
    assert remembered(memory)
    memory.answered("s3://elsewhere/x", started=clock.now + 1.0)  # another endpoint
    assert remembered(memory)
    clock.now += 0.5
    memory.answered("s3://bucket/other.jpg", started=clock.now)
    assert not remembered(memory)


def test_the_memory_is_bounded() -> None:
    clock = Clock()
    memory = StallMemory(5.0, limit=8, clock=clock)
    for i in range(100):
        clock.now += 0.001
        memory.failed(f"s3://bucket/{i}", "e1", timeout())
    assert len(memory) <= 8
    assert remembered(memory, "s3://bucket/99")


@given(
    st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=3.0), st.sampled_from(["check", "fail", "meet"])),
        max_size=40,
    )
)
def test_no_memory_outlives_its_last_genuine_failure(steps: list[tuple[float, str]]) -> None:
    """Whatever callers do, the memory is in force exactly while the last genuine timeout
    is younger than its length."""
    clock = Clock()
    memory = StallMemory(5.0, clock=clock)
    last_failure: float | None = None
    for advance, action in steps:
        clock.now += advance
        if action == "fail":
            memory.failed(URL, "e1", timeout())
            last_failure = clock.now
        elif action == "meet":
            try:
                memory.check(URL, "e1")
            except TransientStorageError as exc:
                memory.failed(URL, "e1", exc)
        expected = last_failure is not None and clock.now - last_failure < 5.0
        assert remembered(memory) == expected


def test_endpoint_of() -> None:
    assert endpoint_of("s3://bucket/a/b.jpg") == "s3://bucket"
    assert endpoint_of("file:///data/x") == "file://"
    assert endpoint_of("rados://pool/obj") == "rados://pool"
