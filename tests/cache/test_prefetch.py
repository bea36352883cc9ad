"""Prefetch (progress, resume, cancel), order hints within a byte budget, sequential readahead."""

from __future__ import annotations

import threading

import pytest

from datahub.cache.pages import page_key
from datahub.cache.prefetch import WarmUnit, run_prefetch
from datahub.storage.base import ObjectRef
from tests.cache.conftest import gated_cache, put_objects, wait_for


class Counting:
    """A progress sink: counts updates; may set ``cancel`` after ``stop_after`` of them."""

    def __init__(self, cancel: threading.Event | None = None, stop_after: int = 0) -> None:
        self.n = self.bytes = 0
        self.cancel, self.stop_after = cancel, stop_after
        self._lock = threading.Lock()

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        with self._lock:
            self.n += n
            self.bytes += nbytes
            if self.cancel is not None and self.n >= self.stop_after:
                self.cancel.set()


def test_prefetch_warms_everything_reports_progress_and_a_rerun_skips_it(make_cache, source) -> None:
    objects = put_objects(source, [100, 1024, 3000, 0] * 5)
    cache = make_cache(prefetch_concurrency=4)
    progress = Counting()
    report = cache.prefetch((ref for ref, _ in objects), progress=progress)
    pages = sum((ref.size + 1023) // 1024 for ref, _ in objects)
    assert report.objects == 20 and report.pages_fetched == pages and report.failed == 0
    assert report.bytes_fetched == sum(ref.size for ref, _ in objects) == progress.bytes
    assert progress.n == 20 and cache.origin.counters.fetches == pages
    rerun = cache.prefetch(ref for ref, _ in objects)
    assert rerun.pages_fetched == 0 and rerun.pages_cached == pages
    fetches = cache.origin.counters.fetches
    for ref, data in objects:
        assert cache.read(ref) == data
    assert cache.origin.counters.fetches == fetches


def test_prefetch_can_be_cancelled_and_resumed(make_cache, source) -> None:
    objects = put_objects(source, [500] * 40)
    cache = make_cache(prefetch_concurrency=2)
    cancel = threading.Event()
    first = cache.prefetch(
        (ref for ref, _ in objects), progress=Counting(cancel, stop_after=5), cancel=cancel
    )
    assert first.cancelled and first.pages_fetched < 40
    second = cache.prefetch(ref for ref, _ in objects)
    assert not second.cancelled
    assert second.pages_cached == first.pages_fetched and second.pages_fetched == 40 - first.pages_fetched


def test_prefetch_reports_failures_and_keeps_going(make_cache, source) -> None:
    objects = put_objects(source, [100] * 3)
    missing = ObjectRef(source.url_for("gone.bin"), "x", 10)
    cache = make_cache()
    report = cache.prefetch([objects[0][0], missing, objects[1][0], objects[2][0]])
    assert report.failed == 1 and report.pages_fetched == 3
    assert report.errors[0][0] == missing.url and "not found" in report.errors[0][1]


def test_hints_fetch_ahead_within_the_byte_budget(make_cache, source) -> None:
    objects = put_objects(source, [1000] * 20)
    refs = [ref for ref, _ in objects]
    cache = make_cache(hint_budget_bytes=5000, prefetch_concurrency=2)
    cache.hint(refs)
    wait_for(lambda: cache._hints.stats()["fetched"] == 5, what="the first 5 hinted objects")
    ram = cache.tiers[0]
    assert all(ram.contains(page_key(r, 1024, 0)) for r in refs[:5])
    assert cache.origin.counters.fetches == 5 and cache._hints.stats()["ahead_bytes"] == 5000
    assert cache.read(refs[0]) == objects[0][1]  # a RAM hit, and it frees budget for one more
    wait_for(lambda: cache._hints.stats()["fetched"] == 6, what="the 6th hinted object")
    assert ram.contains(page_key(refs[5], 1024, 0))
    assert cache.read(refs[3]) == objects[3][1]  # skipping ahead releases everything before it
    wait_for(lambda: cache._hints.stats()["fetched"] == 9, what="three more")
    assert cache.origin.counters.fetches == 9 and cache._hints.stats()["ahead_bytes"] <= 5000


def test_sequential_reads_trigger_readahead(make_cache, source) -> None:
    [(ref, data)] = put_objects(source, [10 * 1024])
    cache = make_cache(readahead_bytes=3 * 1024)
    ram = cache.tiers[0]
    assert cache.read(ref, 0, 1024) == data[:1024]
    assert cache.read(ref, 1024, 1024) == data[1024:2048]
    wanted = [page_key(ref, 1024, i) for i in (2, 3, 4)]
    wait_for(lambda: all(ram.contains(k) for k in wanted), what="pages 2-4 read ahead")
    assert not ram.contains(page_key(ref, 1024, 5))
    fetched = cache.origin.counters.fetches
    assert cache.read(ref, 2048, 3 * 1024) == data[2048 : 5 * 1024]
    assert cache.origin.counters.fetches >= fetched  # pages 2-4 came from RAM
    assert ram.counters.hits >= 3


def test_random_reads_do_not_trigger_readahead(make_cache, source) -> None:
    [(ref, data)] = put_objects(source, [10 * 1024])
    cache = make_cache(readahead_bytes=3 * 1024)
    for page in (7, 2, 5, 0):
        assert cache.read(ref, page * 1024, 10) == data[page * 1024 : page * 1024 + 10]
    assert cache.stats()["readahead"]["submitted"] == 0 and cache.origin.counters.fetches == 4


def test_readahead_queue_is_bounded_and_drops_work(tmp_path, source) -> None:
    [(ref, data)] = put_objects(source, [64 * 1024])
    cache, gated = gated_cache(tmp_path, source, readahead_bytes=8 * 1024, hint_budget_bytes=2048)  # 2 pages
    with cache:
        # page 1 into RAM by another reader (one reader's page 1 then page 0 is the kernel's
        # disorder at a file's start: sequential, see ReaderPositions.note)
        cache.read(ref, 1024, 1, reader="other")
        cache.read(ref, 0, 1, reader="r")  # a first read: not sequential yet, no readahead
        assert cache.stats()["readahead"]["submitted"] == 0
        gated.gate.clear()  # held fetches keep the queue full
        assert (
            cache.read(ref, 1024, 1024, reader="r") == data[1024:2048]
        )  # a RAM hit continuing page 0: sequential
        # one run of pages 2..3: 8 pages wanted, cut to what the queue may hold
        assert cache.stats()["readahead"] == {"submitted": 1, "dropped": 0, "queued_bytes": 2048}
        for _ in range(3):  # pages 1 and 0, then the run, reached the origin
            assert gated.arrived.acquire(timeout=10)
        assert cache.read(ref, 1024, 1, reader="r") == data[1024:1025]  # still sequential: pages 4..5 wanted
        assert cache.stats()["readahead"] == {"submitted": 1, "dropped": 1, "queued_bytes": 2048}
        gated.gate.set()
        wait_for(lambda: cache.stats()["readahead"]["queued_bytes"] == 0, what="the queue to drain")
        assert gated.reads == 3


def test_a_new_hint_replaces_the_previous_order(make_cache, source) -> None:
    objects = put_objects(source, [1000] * 10)
    refs = [ref for ref, _ in objects]
    cache = make_cache(hint_budget_bytes=2000, prefetch_concurrency=1)
    cache.hint(refs[:5])
    wait_for(lambda: cache._hints.stats()["fetched"] == 2, what="two objects of the first order")
    cache.hint(refs[5:])  # a new epoch order: the old one is forgotten, budget starts afresh
    wait_for(lambda: cache._hints.stats()["ahead_bytes"] == 2000, what="two objects of the new order")
    ram = cache.tiers[0]
    wait_for(lambda: all(ram.contains(page_key(r, 1024, 0)) for r in refs[5:7]), what="new order")
    assert not ram.contains(page_key(refs[2], 1024, 0))
    assert cache._hints.stats()["remaining"] == 3


def test_prefetch_workers_report_unexpected_errors_and_raise_an_iterator_failure() -> None:
    refs = [ObjectRef(f"memory://b/{i}", "e", 10) for i in range(50)]

    def warm(unit: WarmUnit) -> tuple[int, int, int]:
        if unit.ref.url.endswith("/7"):
            raise RuntimeError("a bug in a tier")
        return 1, 0, 10

    report = run_prefetch(refs, warm, concurrency=4)
    assert (report.objects, report.pages_fetched, report.failed) == (50, 49, 1)
    assert report.errors == [("memory://b/7", "RuntimeError: a bug in a tier")]

    def failing_listing():
        yield from refs[:5]
        raise OSError("catalog listing broke")

    with pytest.raises(OSError, match="catalog listing broke"):
        run_prefetch(failing_listing(), warm, concurrency=4)


def test_one_large_object_listed_twice_warms_both_occurrences_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass may meet one object version twice (a mount of two versions of a dataset warms
    both, and they share their unchanged files; identical files share one content-addressed
    blob). Its large parts were counted per (URL, etag): the second
    occurrence, taken while the first's last part was in flight, overwrote the first's count,
    and a worker died on a KeyError with its part's pages unreported (and its later units
    never taken)."""
    big = ObjectRef("memory://b/blob", "e", 60)  # six pages of 10: warmed in one-page parts
    started_again = threading.Event()
    seen: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException | None] = []  # what killed a worker thread
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))

    def warm(unit: WarmUnit) -> tuple[int, int, int]:
        with lock:
            seen.append(unit.first)
            again = seen.count(unit.first) == 2
        if unit.first == 0 and again:
            started_again.set()  # the second occurrence's first part is under way
        if unit.first == 5 and not again:  # the first occurrence's last part, in flight...
            assert started_again.wait(30), "the second occurrence was never taken"
        return 1, 0, 10

    progress = Counting()
    report = run_prefetch([big, big], warm, concurrency=2, page_size=10, progress=progress)
    assert errors == []
    assert (report.objects, report.pages_fetched, report.failed) == (2, 12, 0)
    assert progress.n == 2  # each occurrence reported done once
