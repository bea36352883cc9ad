"""The origin scheduler: priority classes, adaptive limit, back-off, bytes bound, stats.

The limit's control loop runs on a fake clock (no sleeping, no timing in assertions); the
priority tests hold real threads in the scheduler and look at who got a slot.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

from datahub.cache.metrics import prometheus_text
from datahub.cache.prefetch import BackgroundFetcher
from datahub.cache.priority import Priority, current_priority, origin_cancel, origin_priority
from datahub.cache.scheduler import AdaptiveLimit, OriginScheduler, Ticket, is_congestion
from datahub.cache.singleflight import SingleFlight
from datahub.errors import Cancelled, TransientStorageError
from datahub.storage.retry import RetryPolicy
from tests.cache.conftest import gated_cache, put_objects, wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run_windows(limit: AdaptiveLimit, clock: Clock, latency: float, windows: int, busy: bool = True) -> None:
    """Feed ``windows`` full windows of requests that each took ``latency`` seconds."""
    for _ in range(windows):
        for _ in range(max(8, limit.current // 2)):
            clock.now += latency / max(1, limit.current)
            limit.sample(latency, busy)
        clock.now += latency  # a window lasts at least one base latency


def test_limit_ramps_past_100_while_latency_holds() -> None:
    clock = Clock()
    limit = AdaptiveLimit(16, minimum=2, maximum=256, clock=clock)
    run_windows(limit, clock, 0.05, 12)
    assert limit.current >= 128
    assert limit.base == pytest.approx(0.05)


def test_limit_never_grows_when_it_holds_nothing_back() -> None:
    clock = Clock()
    limit = AdaptiveLimit(16, minimum=2, maximum=256, clock=clock)
    run_windows(limit, clock, 0.05, 20, busy=False)
    assert limit.current == 16


def test_queueing_latency_shrinks_it_but_never_below_the_configured_start() -> None:
    clock = Clock()
    limit = AdaptiveLimit(16, minimum=2, maximum=256, clock=clock)
    run_windows(limit, clock, 0.05, 6)
    grown = limit.current
    assert grown > 40
    run_windows(limit, clock, 0.05 * 4, 3)  # the store queues: latency 4x the base
    assert 16 <= limit.current < grown
    run_windows(limit, clock, 0.05 * 4, 60)
    assert limit.current == 16  # latency alone: as the fixed pool was


def test_throttling_halves_once_per_round_trip_down_to_the_minimum() -> None:
    clock = Clock()
    limit = AdaptiveLimit(16, minimum=2, maximum=256, clock=clock)
    run_windows(limit, clock, 0.05, 1)
    before = limit.current
    limit.congestion()
    limit.congestion()  # same episode: one cut
    assert limit.current == before // 2 and limit.backoffs == 1
    for _ in range(10):
        clock.now += 1.0
        limit.congestion()
    assert limit.current == 2
    assert not limit.slow_start


def test_congestion_is_throttling_or_timeouts_not_every_failure() -> None:
    assert is_congestion(TransientStorageError("x", status=503, s3_code="SlowDown"))
    assert is_congestion(TransientStorageError("x", status=429))
    assert is_congestion(TransientStorageError("x", timed_out=True))
    assert not is_congestion(TransientStorageError("x", status=500, s3_code="InternalError"))


def hold(scheduler: OriginScheduler, cls: Priority, release: threading.Event, got: list, nbytes: int = 0):
    def run() -> None:
        with scheduler.slot(nbytes, cls=cls):
            got.append(cls)
            assert release.wait(30)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_demand_never_queues_behind_background_and_classes_go_in_order() -> None:
    scheduler = OriginScheduler(2, maximum=2)
    releases = {name: threading.Event() for name in ("warm", "demand", "hinted", "readahead", "warmup")}
    got: list[Priority] = []
    warm = [hold(scheduler, Priority.WARMUP, releases["warm"], got) for _ in range(2)]
    wait_for(lambda: len(got) == 2, what="two warm-up requests in flight")
    waiting = {
        c: hold(scheduler, c, releases[c.name.lower()], got)
        for c in (Priority.WARMUP, Priority.READAHEAD, Priority.HINTED)
    }
    wait_for(lambda: sum(scheduler.stats()["queued"].values()) == 3, what="three background waiters")
    demand = hold(scheduler, Priority.DEMAND, releases["demand"], got)
    wait_for(lambda: Priority.DEMAND in got, what="the demand read admitted past the background limit")
    assert scheduler.stats()["queued"] == {"demand": 0, "hinted": 1, "readahead": 1, "warmup": 1, "flush": 0}
    releases["warm"].set()  # two slots free, but demand holds one of the limit of 2: one waiter goes
    for t in warm:
        t.join(10)
    wait_for(lambda: len(got) == 4, what="the highest waiting class admitted")
    assert got[3] is Priority.HINTED
    assert scheduler.stats()["queued"] == {"demand": 0, "hinted": 0, "readahead": 1, "warmup": 1, "flush": 0}
    releases["demand"].set()
    demand.join(10)
    wait_for(lambda: len(got) == 5, what="the next class admitted")
    assert got[4] is Priority.READAHEAD
    releases["hinted"].set()
    waiting[Priority.HINTED].join(10)
    wait_for(lambda: len(got) == 6, what="warm-up last")
    assert got[5] is Priority.WARMUP
    for event in releases.values():
        event.set()
    for t in waiting.values():
        t.join(10)
    assert scheduler.stats()["in_flight"] == dict.fromkeys((c.name.lower() for c in Priority), 0)


def test_flush_has_its_own_budget() -> None:
    scheduler = OriginScheduler(1, maximum=1)
    release = threading.Event()
    got: list[Priority] = []
    reader = hold(scheduler, Priority.WARMUP, release, got)
    wait_for(lambda: got == [Priority.WARMUP], what="reads full")
    flush = hold(scheduler, Priority.FLUSH, release, got)
    wait_for(lambda: Priority.FLUSH in got, what="a flush upload admitted while reads are full")
    release.set()
    reader.join(10)
    flush.join(10)


def test_bytes_in_flight_are_bounded_but_one_request_always_goes() -> None:
    scheduler = OriginScheduler(8, maximum=8, max_bytes=100)
    release = threading.Event()
    got: list[Priority] = []
    big = hold(scheduler, Priority.WARMUP, release, got, nbytes=500)  # over the bound alone: still admitted
    wait_for(lambda: len(got) == 1, what="one oversized read")
    second = hold(scheduler, Priority.WARMUP, release, got, nbytes=10)
    wait_for(lambda: scheduler.stats()["queued"]["warmup"] == 1, what="the second read waiting for bytes")
    release.set()
    big.join(10)
    second.join(10)
    assert len(got) == 2


def test_a_throttled_attempt_that_a_retry_rescued_still_slows_the_scheduler() -> None:
    scheduler = OriginScheduler(16)
    answers = iter([TransientStorageError("slow down", status=503, s3_code="SlowDown"), b"data"])

    def attempt() -> bytes:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with scheduler.slot(4):
        assert RetryPolicy(3, sleep=lambda _: None).call(attempt) == b"data"
    stats = scheduler.stats()
    assert stats["limit"] == 8 and stats["backoffs"] == 1


def test_priority_is_per_thread_and_restored() -> None:
    seen: list[Priority] = []
    with origin_priority(Priority.WARMUP):
        t = threading.Thread(target=lambda: seen.append(current_priority()))
        t.start()
        t.join()
        assert current_priority() is Priority.WARMUP
    assert current_priority() is Priority.DEMAND
    assert seen == [Priority.DEMAND]  # a new thread starts as demand: pools must set their class


def test_a_demand_read_passes_warm_up_that_fills_the_origin(tmp_path: Path, source) -> None:
    """Through the real cache: warm-up holds every slot at the store; a reader still gets in."""
    objects = put_objects(source, [1000] * 7)
    cache, gated = gated_cache(tmp_path, source, concurrency=2)
    gated.gate.clear()

    def warm(ref) -> None:
        with origin_priority(Priority.WARMUP):
            cache.read(ref)

    warmers = [threading.Thread(target=warm, args=(ref,)) for ref, _ in objects[:6]]
    for t in warmers:
        t.start()
    assert gated.arrived.acquire(timeout=10) and gated.arrived.acquire(timeout=10)
    stats = cache.origin.scheduler.stats
    wait_for(lambda: stats()["queued"]["warmup"] == 4, what="four warm-up reads queued")
    reader = threading.Thread(target=cache.read, args=(objects[6][0],))
    reader.start()
    assert gated.arrived.acquire(timeout=10)  # the demand read reached the store
    assert stats()["in_flight"]["demand"] == 1 and stats()["queued"]["warmup"] == 4
    gated.gate.set()
    for t in [*warmers, reader]:
        t.join(10)
    assert gated.reads == 7
    text = prometheus_text(cache)
    assert 'datahub_origin_queued{class="warmup"} 0' in text
    assert "datahub_origin_limit " in text
    cache.close()


def test_a_cancelled_wait_leaves_the_queue_and_sends_nothing() -> None:
    scheduler = OriginScheduler(1, maximum=1)
    release, cancel = threading.Event(), threading.Event()
    got: list[Priority] = []
    holder = hold(scheduler, Priority.DEMAND, release, got)
    wait_for(lambda: got == [Priority.DEMAND], what="the limit full")
    outcome: list[object] = []

    def warm() -> None:
        with origin_priority(Priority.WARMUP), origin_cancel(cancel):
            try:
                with scheduler.slot(10):
                    outcome.append("sent")
            except Cancelled as exc:
                outcome.append(exc)

    t = threading.Thread(target=warm)
    t.start()
    wait_for(lambda: scheduler.stats()["queued"]["warmup"] == 1, what="warm-up waiting")
    cancel.set()
    t.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], Cancelled)
    assert scheduler.stats()["queued"]["warmup"] == 0 and scheduler.admitted[Priority.WARMUP] == 0
    release.set()
    holder.join(10)
    assert scheduler.stats()["in_flight"]["demand"] == 0


def test_a_nested_slot_takes_no_second_slot() -> None:
    scheduler = OriginScheduler(1, maximum=1)
    with scheduler.slot(10, cls=Priority.WARMUP, sample=False), scheduler.slot(10):
        assert scheduler.stats()["in_flight"]["warmup"] == 1
    assert scheduler.stats()["in_flight"]["warmup"] == 0
    assert scheduler.admitted[Priority.WARMUP] == 1


def test_a_reader_never_merges_into_a_warm_up_fetch_still_queued(tmp_path: Path, source) -> None:
    """Warm-up waits for its slot before it leads a page's fetch, so a reader of that page
    leads it itself instead of waiting behind warm-up's place in the queue."""
    objects = put_objects(source, [1000] * 3)
    cache, gated = gated_cache(tmp_path, source, concurrency=2, prefetch_concurrency=3)
    gated.gate.clear()
    warm = threading.Thread(target=cache.prefetch, args=([ref for ref, _ in objects],))
    warm.start()
    assert gated.arrived.acquire(timeout=10) and gated.arrived.acquire(timeout=10)
    stats = cache.origin.scheduler.stats
    wait_for(lambda: stats()["queued"]["warmup"] == 1, what="the third warm-up page queued")
    readers = [threading.Thread(target=cache.read, args=(ref,)) for ref, _ in objects]
    for t in readers:
        t.start()
    assert gated.arrived.acquire(timeout=10)  # the reader of the queued page fetched it itself
    assert stats()["in_flight"]["demand"] == 1
    gated.gate.set()
    for t in [*readers, warm]:
        t.join(10)
    assert gated.reads == 3  # and warm-up, admitted later, found it cached
    cache.close()


def test_read_ahead_jobs_wait_for_their_slot_before_they_claim_anything() -> None:
    """A queued read-ahead run has claimed no page yet: a reader of those pages fetches them
    itself instead of waiting behind the run's place in the origin queue."""
    scheduler = OriginScheduler(1, maximum=1)
    release = threading.Event()
    got: list[Priority] = []
    holder = hold(scheduler, Priority.DEMAND, release, got)
    wait_for(lambda: got == [Priority.DEMAND], what="the limit full")
    fetcher = BackgroundFetcher(workers=1, max_queued_bytes=1 << 20, scheduler=scheduler)
    ran: list[Priority] = []
    assert fetcher.submit("run", 10, lambda: ran.append(current_priority()))
    wait_for(lambda: scheduler.stats()["queued"]["readahead"] == 1, what="the run waiting for its slot")
    assert ran == []  # it has not started, so it holds no claim
    release.set()
    holder.join(10)
    wait_for(lambda: ran == [Priority.READAHEAD], what="the run admitted in its class")
    fetcher.close()


def test_a_reader_of_a_page_a_queued_stream_claimed_is_served_in_demand_order(
    tmp_path: Path, moto_endpoint
) -> None:
    """Issue 13: a stream claims its window before its request is admitted. A reader of a
    claimed page waits for the stream, so the stream's queued request takes the reader's
    class: it goes before queued hinted work, within demand's own limit and reserve."""
    from datahub.cache import RamTier, assemble_cache, make_policy
    from datahub.cache.origin import Origin
    from datahub.config import load_config
    from datahub.storage import StoreRegistry

    config = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    bucket = moto_endpoint.new_bucket("inversion")
    scheduler = OriginScheduler(2, maximum=2, minimum=2)
    with StoreRegistry(config) as registry:
        [(ref, data)] = put_objects(registry.store(f"s3://{bucket}"), [40 * 1024 + 5], seed=13)
        origin = Origin(registry, scheduler=scheduler)
        cache = assemble_cache(
            [RamTier(1 << 20, make_policy("lru", 1 << 20))],
            origin,
            page_size=1024,
            readahead_bytes=4 * 1024,
            stream_min_bytes=1,
            fill_whole_object_max=0,
        )
        blockers = [threading.Event(), threading.Event()]
        hinted_release = threading.Event()
        with cache, contextlib.ExitStack() as stack:
            stack.callback(lambda: [e.set() for e in (*blockers, hinted_release)])  # never hang on failure
            got: list[Priority] = []
            holders = [hold(scheduler, Priority.DEMAND, event, got) for event in blockers]
            wait_for(lambda: len(got) == 2, what="demand work holding the whole limit")
            hinted = [hold(scheduler, Priority.HINTED, hinted_release, got) for _ in range(2)]
            wait_for(lambda: scheduler.stats()["queued"]["hinted"] == 2, what="two hinted requests queued")
            read: list[bytes] = []
            reader = threading.Thread(target=lambda: read.append(cache.read(ref, 0, 1024, reader="r")))
            reader.start()  # starts a stream that claims pages 0..4; its request queues
            wait_for(lambda: cache._flight.merged >= 1, what="the reader waiting for the stream's page 0")
            wait_for(
                lambda: scheduler.stats()["queued"]["demand"] == 1,
                timeout=10,
                what="the stream's queued request promoted to the reader's class",
            )
            assert scheduler.stats()["queued"] == {
                "demand": 1,
                "hinted": 2,
                "readahead": 0,
                "warmup": 0,
                "flush": 0,
            }
            blockers[0].set()  # one slot frees: the stream (for the reader) goes, not hinted work
            holders[0].join(10)
            reader.join(30)
            assert read == [data[:1024]]
            assert scheduler.admitted[Priority.HINTED] == 0
            assert scheduler.stats()["queued"]["hinted"] == 2
            assert scheduler.stats()["promoted"] == 1
            assert "datahub_origin_promoted_total 1" in prometheus_text(cache)
            blockers[1].set()
            hinted_release.set()
            for t in [*holders, *hinted]:
                t.join(10)
            cache.read(ref, 1024, 1024, reader="r")  # the reader goes on; then the stream stops at close
        stats = scheduler.stats()
        assert stats["in_flight"] == dict.fromkeys((c.name.lower() for c in Priority), 0)
        assert stats["queued"] == dict.fromkeys((c.name.lower() for c in Priority), 0)


def hold_ticket(scheduler: OriginScheduler, ticket: Ticket, release: threading.Event, got: list, **ctx):
    """A stream's thread: its request queues under ``ticket`` in class READAHEAD."""

    def run() -> None:
        with origin_priority(Priority.READAHEAD), ticket.use(), contextlib.ExitStack() as stack:
            if "cancel" in ctx:
                stack.enter_context(origin_cancel(ctx["cancel"]))
            try:
                with scheduler.slot(10, sample=False):
                    got.append(("ticket", dict(scheduler.stats()["in_flight"])))
                    assert release.wait(30)
            except Cancelled as exc:
                got.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_waiter_on_a_claim_raises_the_owners_queued_request_to_its_class() -> None:
    scheduler = OriginScheduler(2, maximum=2, minimum=2)
    flight: SingleFlight[bytes] = SingleFlight()
    ticket = Ticket(scheduler, Priority.READAHEAD)
    blockers, later = [threading.Event(), threading.Event()], threading.Event()
    got: list = []
    try:
        holders = [hold(scheduler, Priority.DEMAND, event, got) for event in blockers]
        wait_for(lambda: len(got) == 2, what="demand work holding the limit")
        hinted = hold(scheduler, Priority.HINTED, later, got)
        wait_for(lambda: scheduler.stats()["queued"]["hinted"] == 1, what="hinted work queued")
        claim = flight.claim("page", ticket)
        owner = hold_ticket(scheduler, ticket, later, got)
        wait_for(lambda: scheduler.stats()["queued"]["readahead"] == 1, what="the owner's request queued")

        def warm_up_joins() -> None:
            with origin_priority(Priority.WARMUP):
                flight.do("page", lambda: b"never: the claim's owner delivers")

        warm = threading.Thread(target=warm_up_joins)
        warm.start()
        wait_for(lambda: flight.merged == 1, what="warm-up waiting for the claim")
        assert scheduler.stats()["queued"]["readahead"] == 1  # a lower class lends nothing
        reader = threading.Thread(target=flight.do, args=("page", lambda: b"never"))
        reader.start()  # a demand reader (the default class) joins the claim
        wait_for(lambda: scheduler.stats()["queued"]["demand"] == 1, what="the owner's request raised")
        assert scheduler.stats()["queued"] == {
            "demand": 1,
            "hinted": 1,
            "readahead": 0,
            "warmup": 0,
            "flush": 0,
        }
        assert scheduler.stats()["promoted"] == 1
        blockers[0].set()  # one slot frees: the raised request goes before hinted work
        holders[0].join(10)
        wait_for(lambda: len(got) == 3, what="the raised request admitted")
        assert got[2] == ("ticket", {"demand": 2, "hinted": 0, "readahead": 0, "warmup": 0, "flush": 0})
        assert scheduler.stats()["queued"]["hinted"] == 1
        flight.settle("page", claim, value=b"page")
        reader.join(10)
        warm.join(10)
        blockers[1].set()
        later.set()
        for t in [holders[1], hinted, owner]:
            t.join(10)
        stats = scheduler.stats()  # the raised request was released in the class it ran in
        assert stats["in_flight"] == dict.fromkeys((c.name.lower() for c in Priority), 0)
        assert scheduler.admitted[Priority.DEMAND] == 3 and scheduler.admitted[Priority.READAHEAD] == 0
        assert ticket.cls is Priority.READAHEAD and ticket.waiter is None
    finally:
        for event in (*blockers, later):
            event.set()


def test_a_raise_while_nothing_queues_applies_to_the_owners_next_request_only() -> None:
    scheduler = OriginScheduler(2, maximum=2)
    ticket = Ticket(scheduler, Priority.READAHEAD)
    with origin_priority(Priority.HINTED):
        ticket.joined()
    with origin_priority(Priority.READAHEAD), ticket.use():
        with scheduler.slot(10, sample=False):
            assert scheduler.stats()["in_flight"]["hinted"] == 1
            with origin_priority(Priority.DEMAND):
                ticket.joined()  # its request runs: the raise is kept for the next one
        with scheduler.slot(10, sample=False):
            assert scheduler.stats()["in_flight"]["demand"] == 1
        with scheduler.slot(10, sample=False):
            assert scheduler.stats()["in_flight"]["readahead"] == 1
        with scheduler.slot(cls=Priority.FLUSH):  # uploads are never raised
            assert scheduler.stats()["in_flight"]["flush"] == 1
    other = OriginScheduler(2, maximum=2)
    ticket.joined()
    with origin_priority(Priority.READAHEAD), ticket.use(), other.slot(10, sample=False):
        assert other.stats()["in_flight"]["readahead"] == 1  # another scheduler's ticket: ignored
    assert ticket.cls is Priority.DEMAND  # still waiting for the ticket's own scheduler
    assert scheduler.stats()["in_flight"] == dict.fromkeys((c.name.lower() for c in Priority), 0)
    # both requests made raised are counted, as a queued one moved would be: which of the two a
    # reader's join meets is the threads' timing only (a flake of the suite under load)
    assert scheduler.stats()["promoted"] == 2
    assert other.stats()["promoted"] == 0


def test_a_raised_request_cancelled_while_it_queues_leaves_no_trace() -> None:
    scheduler = OriginScheduler(1, maximum=1, minimum=1)
    ticket = Ticket(scheduler, Priority.READAHEAD)
    release, cancel = threading.Event(), threading.Event()
    got: list = []
    try:
        holder = hold(scheduler, Priority.DEMAND, release, got)
        wait_for(lambda: got == [Priority.DEMAND], what="the limit full")
        owner = hold_ticket(scheduler, ticket, release, got, cancel=cancel)
        wait_for(lambda: scheduler.stats()["queued"]["readahead"] == 1, what="the owner queued")
        ticket.joined()
        assert scheduler.stats()["queued"]["demand"] == 1
        cancel.set()
        owner.join(10)
        assert isinstance(got[1], Cancelled)
        assert scheduler.stats()["queued"] == dict.fromkeys((c.name.lower() for c in Priority), 0)
        assert ticket.waiter is None and scheduler.admitted[Priority.DEMAND] == 1
    finally:
        release.set()
    holder.join(10)
    assert scheduler.stats()["in_flight"] == dict.fromkeys((c.name.lower() for c in Priority), 0)
