"""The bucket warm-up's controller (fuse_adapter.bucket_warmup) on a fake clock: it starts the
passes the policy decides on, stops one when its readers go idle and reports each state.

The source here is a stand-in for the cache whose warm-up pass blocks until it is cancelled,
so that what stops it is the controller's decision, never how fast a pass runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from datahub.cache.prefetch import PrefetchReport
from datahub.cache.warmup_policy import PolicySettings, WarmupPolicy
from datahub.storage.base import ObjectRef
from fuse_adapter.bucket_warmup import BucketWarmup, ObservedSource

ROOT = "s3://b/p/"
GUARD = 30.0  # seconds before a wait fails the test


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class BlockingSource:
    """Holds nothing; a pass takes its first object, then waits for its cancel."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.idle = float("inf")
        self.passes: list[list[str]] = []
        self.status: Callable[[], dict] | None = None
        self.taking = threading.Event()

    def read(self, ref: ObjectRef, offset: int = 0, size: int | None = None, *, reader=None) -> bytes:
        return b"x" * ref.size

    def read_cached(self, ref, offset=0, size=None):
        return None

    def hint(self, refs) -> None:
        pass

    def prefetch(self, refs: Iterable[ObjectRef], *, cancel: threading.Event | None = None, progress=None):
        it = iter(refs)
        first = next(it)
        self.passes.append([first.url])
        progress.update(1, first.size)
        self.taking.set()
        assert cancel is not None and cancel.wait(GUARD)
        return PrefetchReport(objects=1, cancelled=True)

    def watch_requests(self, counter) -> None:
        pass

    def holds(self, ref: ObjectRef) -> bool:
        return False

    def idle_for(self) -> float:
        return self.idle

    def warm_room(self) -> int:
        return self.room

    def report_warmup(self, status: Callable[[], dict]) -> None:
        self.status = status

    def close(self) -> None:
        pass


def refs() -> list[ObjectRef]:
    return [ObjectRef(f"{ROOT}d{i % 2}/{i}.jpg", "e", 10 + i) for i in range(20)]


def wait(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + GUARD
    while not predicate():
        assert time.monotonic() < deadline, "not reached"
        time.sleep(0.01)


def started(source: BlockingSource, mode: bool | None, clock: Clock, **settings) -> BucketWarmup:
    policy = WarmupPolicy(PolicySettings(**settings), mode, ROOT, clock)
    warmup = BucketWarmup(source, policy, "/mnt/x", threading.Event(), clock=clock, poll_seconds=0.01)
    warmup.start(lambda: iter(refs()), lambda: True)
    return warmup


def test_a_fitting_snapshot_warms_at_once_and_stops_when_nobody_reads() -> None:
    clock, source = Clock(), BlockingSource(room=10**6)
    warmup = started(source, None, clock, idle_stop_seconds=60.0)
    wait(source.taking.is_set)
    status = warmup.status()
    assert (status["state"], status["reason"], status["objects_total"]) == ("running", "fits", 20)
    assert status["objects_warmed"] == 1 and status["objects_left"] == 19
    assert source.passes[0] == [f"{ROOT}d0/0.jpg"]  # smallest first
    clock.now += 59.0
    time.sleep(0.1)
    assert warmup.status()["state"] == "running"
    clock.now += 1.0  # 60 s since it started, and no reader came
    wait(lambda: warmup.status()["state"] == "stopped-idle")
    warmup.close()


def test_a_pattern_starts_a_pass_of_its_directory_and_readers_keep_it_running() -> None:
    clock, source = Clock(), BlockingSource(room=10**6)
    warmup = started(source, None, clock, fits_max_objects=5, opens=3, idle_stop_seconds=60.0)
    wait(lambda: warmup.status()["state"] == "waiting")  # too many objects to warm at mount
    observed = ObservedSource(source, warmup)
    for r in refs()[0:6:2]:  # three cold opens in d0/
        observed.read(r)
    wait(source.taking.is_set)
    status = warmup.status()
    assert (status["reason"], status["scope"], status["objects_left"]) == ("pattern", f"{ROOT}d0/", 9)
    source.idle = 5.0  # readers are busy
    clock.now += 1000.0
    time.sleep(0.1)
    assert warmup.status()["state"] == "running"
    source.idle = 60.0
    wait(lambda: warmup.status()["state"] == "stopped-idle")
    warmup.close()


def test_a_flag_pass_never_stops_for_idle_readers_and_unmount_cancels_it() -> None:
    clock, source = Clock(), BlockingSource(room=1)  # the flag does not ask whether it fits
    warmup = started(source, True, clock, idle_stop_seconds=1.0)
    wait(source.taking.is_set)
    clock.now += 10**6
    time.sleep(0.1)
    assert (warmup.status()["state"], warmup.status()["reason"]) == ("running", "flag")
    warmup.close()
    assert source.status is not None and source.status()["mount"] == "/mnt/x"


def test_a_listing_by_directory_is_asked_for_once_readers_open_as_many_files_as_a_pattern() -> None:
    clock, source = Clock(), BlockingSource(room=10**6)
    policy = WarmupPolicy(PolicySettings(fits_max_objects=5, opens=3), None, ROOT, clock)
    warmup = BucketWarmup(source, policy, "/mnt/x", threading.Event(), clock=clock, poll_seconds=0.01)
    listed, asked = threading.Event(), []
    warmup.start(lambda: iter(refs()), lambda: listed.wait(GUARD), want_listing=lambda: asked.append(1))
    warmup.listing_deferred()  # a large bucket: listed by directory
    assert warmup.status()["state"] == "deferred"
    observed = ObservedSource(source, warmup)
    for r in [refs()[0], refs()[0], refs()[1]]:  # two distinct files: not yet
        observed.read(r)
    assert asked == [] and warmup.status()["state"] == "deferred"
    observed.read(refs()[2])
    observed.read(refs()[3])
    assert asked == [1] and warmup.status()["state"] == "listing"  # asked once
    listed.set()  # the whole listing is in: totals, then the policy decides as usual
    wait(lambda: warmup.status()["state"] == "waiting")
    assert warmup.status()["objects_total"] == 20 and source.passes == []
    warmup.close()
