"""ReaderActivity: what counts as readers being busy, and what ``hold`` lets through."""

from __future__ import annotations

import threading
import time

from datahub.cache import activity as activity_module
from datahub.cache.activity import ReaderActivity
from datahub.storage.base import ObjectRef


def ref(size: int, name: str = "k") -> ObjectRef:
    return ObjectRef(url=f"s3://b/{name}", etag="e", size=size)


def test_nothing_read_yet_is_idle_and_a_read_is_activity() -> None:
    activity = ReaderActivity(idle_seconds=3600, large_bytes=100)
    assert activity.idle_for() == float("inf")
    activity.saw(ref(10))
    assert activity.idle_for() < 3600


def test_a_batch_of_hits_is_activity_and_an_empty_one_is_not() -> None:
    """The once-a-second fold of hits answered in C reports a batch (``saw_all``): an empty
    second read nothing, so it must not make readers look busy; a batch's large objects count
    as opened, as one ``saw`` each would."""
    activity = ReaderActivity(idle_seconds=3600, large_bytes=100)
    activity.saw_all([])
    assert activity.idle_for() == float("inf")
    activity.saw_all(iter([ref(10, "small"), ref(500, "big")]))
    assert activity.idle_for() < 3600
    never = threading.Event()
    assert activity.hold(ref(500, "big"), never)


def test_small_objects_and_opened_large_ones_are_never_held() -> None:
    activity = ReaderActivity(idle_seconds=3600, large_bytes=100)
    activity.saw(ref(10, "small"))  # busy from now on
    never = threading.Event()
    assert activity.hold(ref(50, "other-small"), never)
    activity.saw(ref(500, "big"))
    assert activity.hold(ref(500, "big"), never)


def test_a_moving_counter_is_activity_and_a_still_one_is_not(monkeypatch) -> None:
    monkeypatch.setattr(activity_module, "POLL_SECONDS", 0.0)  # read the counter on every ask
    activity = ReaderActivity(idle_seconds=3600, large_bytes=100)
    value = [0]
    activity.watch(lambda: value[0])
    assert activity.idle_for() == float("inf")  # watching alone is no activity
    value[0] += 1
    assert activity.idle_for() < 3600
    first = activity.idle_for()
    time.sleep(0.05)
    assert activity.idle_for() >= first  # still: the idle time grows


def test_counters_are_read_at_most_once_per_poll_period_whoever_asks(monkeypatch) -> None:
    monkeypatch.setattr(activity_module, "POLL_SECONDS", 3600.0)
    activity = ReaderActivity(idle_seconds=3600, large_bytes=100)
    calls = [0]

    def counter() -> int:
        calls[0] += 1
        return calls[0]  # moves on every read

    activity.watch(counter)
    assert calls[0] == 1
    for _ in range(100):  # many held workers asking at once
        activity.idle_for()
    assert calls[0] == 2  # one read for all of them


def test_a_counter_that_fails_counts_as_still() -> None:
    activity = ReaderActivity(idle_seconds=3600, large_bytes=100)

    def gone() -> int:
        raise FileNotFoundError("/proc/self/task/1/io")

    activity.watch(gone)
    assert activity.idle_for() == float("inf")


def test_hold_returns_false_when_cancelled_while_waiting() -> None:
    activity = ReaderActivity(idle_seconds=3600, large_bytes=100)
    activity.saw(ref(10))
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    assert activity.hold(ref(500, "big"), cancel) is False
