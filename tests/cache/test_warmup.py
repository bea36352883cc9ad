"""Warm-up that never hurts (issue 13 item 3): what ``TieredCache.prefetch`` fetches, in which
order and class, what it leaves alone, and how it stops.

Behaviour only: requests counted at the origin (the cache's counters, or a recording store
in front of the real one), pages looked up in the tiers; nothing here asserts a timing.
"""

from __future__ import annotations

import threading
from pathlib import Path

from datahub.cache import DiskTier, make_policy
from datahub.cache.pages import PageKey, page_count, page_key, page_length
from datahub.cache.prefetch import LARGE_PAGES
from datahub.cache.priority import Priority, current_priority
from datahub.storage.base import ObjectRef, ObjectStore
from tests.cache.conftest import GatedStore, gated_cache, put_objects, wait_for

PS = 1024  # page size of every cache in this file


class RecordingStore(GatedStore):
    """A GatedStore that also records each read: (key, start, end, origin priority class)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.log: list[tuple[str, int, int | None, Priority]] = []

    def read(self, key: str, start: int = 0, end: int | None = None, etag: str | None = None) -> bytes:
        with self._lock:
            self.log.append((key, start, end, current_priority()))
        return super().read(key, start, end, etag)


def recording_cache(tmp_path: Path, source: ObjectStore, **options: object):
    cache, gated = gated_cache(tmp_path, source, **options)
    recording = RecordingStore(source)
    gated_registry = cache.origin.stores
    gated_registry.store_ = recording
    return cache, recording


def keys(objects: list[tuple[ObjectRef, bytes]]) -> list[str]:
    return [ref.url.rsplit("/origin/", 1)[1] for ref, _ in objects]


def pages_of(ref: ObjectRef) -> list[PageKey]:
    return [page_key(ref, PS, i) for i in range(page_count(ref.size, PS))]


def test_warm_up_skips_what_any_tier_holds_and_a_rerun_sends_nothing(make_cache, source, tmp_path) -> None:
    objects = put_objects(source, [700] * 12)
    shared_dir = tmp_path / "shared-tier"
    shared_dir.mkdir()
    cache = make_cache(shared_url=shared_dir.as_uri(), shared_bytes=1024**2)
    ram, disk, shared = cache.tiers
    assert [t.name for t in cache.tiers] == ["ram", "disk", "shared"]
    # objects 0-2 only in RAM, 3-5 only on disk, 6-8 only in the shared tier; 9-11 nowhere
    for tier, chunk in ((ram, objects[0:3]), (disk, objects[3:6]), (shared, objects[6:9])):
        for ref, data in chunk:
            assert tier.put(page_key(ref, PS, 0), data)
    shared.flush(timeout=30)
    assert cache.origin.counters.fetches == 0

    report = cache.prefetch(ref for ref, _ in objects)
    assert (report.pages_cached, report.pages_fetched, report.failed) == (9, 3, 0)
    assert cache.origin.counters.fetches == 3  # only the three no tier held
    for ref, _ in objects[9:]:
        assert disk.contains(page_key(ref, PS, 0))

    rerun = cache.prefetch(ref for ref, _ in objects)
    assert (rerun.pages_cached, rerun.pages_fetched) == (12, 0) and not rerun.budget_reached
    assert cache.origin.counters.fetches == 3  # the version is cached: not one more request


def test_small_objects_first_then_large_ones_in_one_page_parts_at_warm_up_priority(tmp_path, source) -> None:
    sizes = [(LARGE_PAGES + 6) * PS + 100, 300, 2 * PS + 5, (LARGE_PAGES + 2) * PS, 900]
    objects = put_objects(source, sizes)
    cache, store = recording_cache(tmp_path, source, prefetch_concurrency=1)
    with cache:
        report = cache.prefetch(ref for ref, _ in objects)
        assert report.failed == 0 and report.objects == 5
        assert report.pages_fetched == sum(page_count(s, PS) for s in sizes)
        names = keys(objects)
        read_keys = [k for k, *_ in store.log]
        small = [names[1], names[2], names[2], names[2], names[4]]  # object 2 has 3 pages
        assert read_keys[:5] == small  # every small object before any large one
        assert read_keys[5:] == [names[0]] * page_count(sizes[0], PS) + [names[3]] * page_count(sizes[3], PS)
        for ref, _ in (objects[0], objects[3]):  # large: one ranged request per page
            ranges = [(s, e) for k, s, e, _ in store.log if ref.url.endswith(k)]
            ends = [i * PS + page_length(ref, PS, i) for i in range(page_count(ref.size, PS))]
            # the range of a record's last page asks for one byte more, whether it ends inside
            # a page or on a boundary: an object longer than its record answers it
            # (datahub.cache.origin.read_range)
            assert ranges == [(i * PS, end + (end == ref.size)) for i, end in enumerate(ends)]
        assert {cls for *_, cls in store.log} == {Priority.WARMUP}
        for ref, data in objects:
            assert cache.read(ref) == data
        assert len(store.log) == report.pages_fetched  # every page was stored: no read went out again


def test_large_object_parts_are_fetched_side_by_side(tmp_path, source) -> None:
    [(ref, data)] = put_objects(source, [(LARGE_PAGES + 8) * PS])
    cache, store = recording_cache(tmp_path, source, prefetch_concurrency=4)
    with cache:
        store.gate.clear()
        done: list = []
        worker = threading.Thread(target=lambda: done.append(cache.prefetch([ref])))
        worker.start()
        for _ in range(4):  # four parts of the one object are in flight at once
            assert store.arrived.acquire(timeout=30)
        assert store.active == 4
        store.gate.set()
        worker.join(timeout=60)
        assert done and done[0].pages_fetched == page_count(ref.size, PS) and done[0].objects == 1
        assert cache.read(ref) == data


def test_a_version_twice_the_disk_tier_warms_what_fits_in_order_and_stops(make_cache, source) -> None:
    disk_bytes, ram_bytes = 32 * PS, 8 * PS
    objects = put_objects(source, [PS] * 64)  # 64 KiB: twice the disk tier
    cache = make_cache(disk_bytes=disk_bytes, ram_bytes=ram_bytes)  # default policy (tinylfu)
    ram, disk = cache.tiers
    report = cache.prefetch(ref for ref, _ in objects)
    assert report.budget_reached and report.failed == 0
    fits = int(disk_bytes * disk.low) // PS  # what stays below the disk tier's low watermark
    assert report.pages_fetched == fits and cache.origin.counters.fetches == fits
    for i, (ref, _) in enumerate(objects):  # a prefix of the order, whole; nothing after it
        assert disk.contains(page_key(ref, PS, 0)) == (i < fits), i
    assert ram.usage().used <= ram_bytes * ram.low  # RAM took what it had room for, then no more
    cache.maintain()  # the evictors run: nothing of the pass is above a watermark
    assert disk.counters.evictions == 0 and ram.counters.evictions == 0
    assert disk.usage().entries == fits

    rerun = cache.prefetch(ref for ref, _ in objects)  # the first part is cached: stop there again
    assert rerun.budget_reached and rerun.pages_fetched == 0 and rerun.pages_cached == fits
    assert cache.origin.counters.fetches == fits and disk.counters.evictions == 0


def test_a_cache_full_of_pages_readers_use_is_left_alone(make_cache, source) -> None:
    """A disk tier full of another version's popular pages refuses warm pages (tinylfu
    admission): the pass stops at the first refusal instead of fetching what nobody keeps."""
    popular = put_objects(source, [PS] * 30, seed=1, prefix="other")
    version = put_objects(source, [PS] * 20, seed=2, prefix="version")
    cache = make_cache(disk_bytes=32 * PS, ram_bytes=8 * PS, prefetch_concurrency=1)
    ram, disk = cache.tiers
    for _ in range(3):  # readers use these pages again and again
        for ref, data in popular:
            assert cache.read(ref) == data
    cache.maintain()
    held = [k for ref, _ in popular for k in pages_of(ref) if disk.contains(k)]
    assert len(held) >= 25
    evictions, fetches = disk.counters.evictions, cache.origin.counters.fetches
    report = cache.prefetch(ref for ref, _ in version)
    assert report.budget_reached and report.failed == 0
    assert cache.origin.counters.fetches - fetches == 1  # one page refused, then it stopped
    assert all(disk.contains(k) for k in held) and disk.counters.evictions == evictions


def test_a_readers_announced_order_is_warmed_first(tmp_path, source) -> None:
    objects = put_objects(source, [500] * 16)
    names = keys(objects)
    order = [7, 3, 12, 0, 9, 15, 1, 4]  # half the version, in the reader's order
    cache, store = recording_cache(tmp_path, source, prefetch_concurrency=1, hint_budget_bytes=500)
    with cache:
        cache.hint([objects[i][0] for i in order])  # e.g. a datahub.torch sampler's epoch
        wait_for(lambda: cache._hints.stats()["fetched"] == 1, what="the first hinted object")
        report = cache.prefetch(ref for ref, _ in objects)
        assert report.failed == 0 and report.objects == 16
        warm = [k for k, _s, _e, cls in store.log if cls == Priority.WARMUP]
        hinted = [k for k, _s, _e, cls in store.log if cls == Priority.HINTED]
        assert hinted == [names[order[0]]]
        assert warm[: len(order) - 1] == [names[i] for i in order[1:]]  # the announced order first
        assert sorted(warm[len(order) - 1 :]) == sorted(names[i] for i in range(16) if i not in order)
        assert len(store.log) == 16  # each object fetched once


def test_a_cancelled_warm_up_stops_and_leaves_only_whole_pages(tmp_path, source) -> None:
    objects = put_objects(source, [700] * 30 + [(LARGE_PAGES + 10) * PS])
    cache, store = recording_cache(tmp_path, source, prefetch_concurrency=4)
    cancel = threading.Event()
    done: list = []
    with cache:
        store.gate.clear()
        worker = threading.Thread(
            target=lambda: done.append(cache.prefetch((r for r, _ in objects), cancel=cancel))
        )
        worker.start()
        for _ in range(4):
            assert store.arrived.acquire(timeout=30)
        cancel.set()  # as unmount or Ctrl-C does
        in_flight = store.reads
        store.gate.set()
        worker.join(timeout=60)
        assert not worker.is_alive() and done[0].cancelled
        assert store.reads == in_flight == 4  # nothing started after the cancel
        assert done[0].pages_fetched == 4
    # a fresh disk tier on the same directory sees whole, verified pages only
    disk = DiskTier(tmp_path / "disk", 1 << 20, make_policy("lru", 1 << 20))
    try:
        found = 0
        for ref, data in objects:
            for key in pages_of(ref):
                if disk.contains(key):
                    found += 1
                    start = key.index * PS
                    assert disk.get(key) == data[start : start + page_length(ref, PS, key.index)]
        assert found == 4
    finally:
        disk.close()


def test_datahub_prefetch_sends_no_get_once_the_version_is_cached(tmp_path, monkeypatch) -> None:
    """``datahub prefetch`` against moto: every page once, then a rerun with 0 GETs in moto's log."""
    import contextlib
    import io
    import json
    import re

    from datahub.catalog import Put, Record, open_catalog
    from datahub.cli.main import main
    from datahub.config import load_config
    from datahub.storage import StoreRegistry
    from tests.servers import MotoServer

    server = MotoServer()
    try:
        endpoint = server.endpoint
        s3 = endpoint.s3_config_overrides()["s3"]
        for name, value in s3.items():
            monkeypatch.setenv(
                f"DATAHUB_S3_{name.upper()}", str(value).lower() if value is True else str(value)
            )
        monkeypatch.setenv("DATAHUB_CACHE_PAGE_SIZE", str(PS))
        config = load_config(overrides={"home": str(tmp_path / "var")})
        bucket = endpoint.new_bucket("warm")
        sizes = [300, 2000, (LARGE_PAGES + 3) * PS + 7, 900]
        with StoreRegistry(config) as stores:
            store = stores.store(f"s3://{bucket}/data")
            objects = put_objects(store, sizes)
        catalog = open_catalog(config.resolved_catalog_url)
        catalog.create_dataset("ds")
        catalog.commit(
            "ds", [Put(Record(f"k{i}", ref.url, ref.etag, ref.size)) for i, (ref, _) in enumerate(objects)]
        )
        catalog.close()

        def gets() -> int:
            text = Path(server.log.name).read_text(errors="replace")
            return len(re.findall(rf"GET /{bucket}/data/\S* HTTP/1\.[01]", text))

        def prefetch() -> dict:
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                assert main(["--home", config.home, "--json", "prefetch", "ds@v1"]) == 0
            return json.loads(out.getvalue())

        total = sum(page_count(s, PS) for s in sizes)
        first = prefetch()
        assert (first["pages_fetched"], first["pages_cached"], first["budget_reached"]) == (total, 0, False)
        assert gets() == total
        again = prefetch()
        assert (again["pages_fetched"], again["pages_cached"]) == (0, total)
        assert gets() == total  # the version is cached: not one GET
    finally:
        server.stop()


def test_a_large_object_no_reader_opened_waits_while_readers_are_busy(tmp_path, source) -> None:
    """Readers busy with other objects hold back a large object's warm-up; opening it releases it."""
    small, large, other = put_objects(source, [300, (LARGE_PAGES + 2) * PS, 400])
    cache, store = recording_cache(tmp_path, source, prefetch_concurrency=2, warmup_idle_seconds=3600)
    with cache:
        assert cache.read(other[0]) == other[1]  # a reader is busy (idle for an hour: never, here)
        done: list = []
        worker = threading.Thread(target=lambda: done.append(cache.prefetch([small[0], large[0]])))
        worker.start()
        wait_for(lambda: any(small[0].url.endswith(k) for k, *_ in store.log))
        worker.join(timeout=1.0)
        assert worker.is_alive()  # held: nothing of the large object was requested
        assert not any(large[0].url.endswith(k) for k, *_ in store.log)
        assert cache.read(large[0], 0, 10) == large[1][:10]  # a reader opens it: warm it now
        worker.join(timeout=60)
        assert done and done[0].failed == 0
        assert done[0].pages_fetched == 1 + page_count(large[0].size, PS) - 1  # page 0 was read
        assert cache.read(large[0]) == large[1]


def test_a_held_large_object_is_warmed_once_readers_are_idle_or_dropped_on_cancel(tmp_path, source) -> None:
    (ref, data), (other, _) = put_objects(source, [(LARGE_PAGES + 2) * PS, 200])
    cache, store = recording_cache(tmp_path, source, prefetch_concurrency=2, warmup_idle_seconds=3600)
    with cache:
        cache.read(other)
        store.log.clear()
        cancel = threading.Event()
        done: list = []
        worker = threading.Thread(target=lambda: done.append(cache.prefetch([ref], cancel=cancel)))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and not store.log
        cancel.set()  # unmount: the held workers stop without a request
        worker.join(timeout=60)
        assert done and done[0].cancelled and done[0].pages_fetched == 0 and not store.log

        cache.activity.idle_seconds = 0.2  # readers idle for 0.2 s: the next pass warms it
        report = cache.prefetch([ref])
        assert report.pages_fetched == page_count(ref.size, PS) and not report.cancelled
        assert cache.read(ref) == data


def test_a_large_object_a_reader_announced_is_not_held(tmp_path, source) -> None:
    (big, data), (other, _) = put_objects(source, [(LARGE_PAGES + 2) * PS, 200])
    cache, store = recording_cache(
        tmp_path, source, prefetch_concurrency=2, warmup_idle_seconds=3600, hint_budget_bytes=1
    )
    with cache:
        cache.read(other)  # readers are busy (for the next hour, as far as the hold knows)
        store.log.clear()
        cache.hint([big])  # ... but one announced it will read the large object
        cancel = threading.Event()
        done: list = []
        worker = threading.Thread(target=lambda: done.append(cache.prefetch([big], cancel=cancel)))
        worker.start()
        worker.join(timeout=60)  # returns: nothing waits for idle readers
        cancel.set()
        worker.join(timeout=60)
        [report] = done
        assert report.failed == 0 and not report.cancelled
        assert report.pages_fetched + report.pages_cached == page_count(big.size, PS)
        assert cache.read(big) == data
