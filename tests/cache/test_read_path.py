"""The read path: correct bytes, promotion, demotion, merged misses, bounded origin, failing tiers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from datahub.cache import TieredCache, assemble_cache
from datahub.cache.activity import ReaderActivity
from datahub.cache.disk import DiskTier
from datahub.cache.origin import Origin
from datahub.cache.pages import PageKey, page_key
from datahub.cache.policy import make_policy
from datahub.cache.ram import RamTier
from datahub.cache.singleflight import SingleFlight
from datahub.errors import InvalidInput, ObjectNotFound
from datahub.storage.base import ObjectRef
from tests.cache.conftest import OneStoreRegistry, gated_cache, put_objects, wait_for


def test_reads_return_the_source_bytes_across_page_boundaries(make_cache, source) -> None:
    objects = put_objects(source, [0, 1, 1023, 1024, 1025, 5000])
    cache = make_cache(page_size=1024)
    for ref, data in objects:
        assert cache.read(ref) == data
        for offset, size in [
            (0, 1),
            (1000, 100),
            (1023, 2),
            (1024, 1024),
            (3, None),
            (len(data), 5),
            (0, 10**6),
        ]:
            expected = data[offset:] if size is None else data[offset : offset + size]
            assert cache.read(ref, offset, size) == expected, (ref.size, offset, size)
    with pytest.raises(InvalidInput):
        cache.read(objects[0][0], -1)


def test_view_reads_share_the_cached_page_instead_of_copying_it(make_cache, source) -> None:
    ((ref, data),) = put_objects(source, [5000])
    cache = make_cache(page_size=1024)
    inside = cache.read(ref, 1030, 500, view=True)  # within page 1
    assert isinstance(inside, memoryview) and inside.readonly and inside == data[1030:1530]
    assert isinstance(inside.obj, bytes) and len(inside.obj) == 1024  # the page itself, not a copy
    across = cache.read(ref, 1000, 100, view=True)  # pages 0 and 1: joined once
    assert bytes(across) == data[1000:1100]
    plain = cache.read(ref, 1030, 500)
    assert type(plain) is bytes and plain == data[1030:1530]


def test_second_read_is_a_ram_hit_and_a_restart_reads_from_disk(make_cache, source) -> None:
    [(ref, data)] = put_objects(source, [3000])
    cache = make_cache()
    assert cache.read(ref) == data
    assert cache.origin.counters.fetches == 3
    assert cache.read(ref) == data
    assert cache.origin.counters.fetches == 3
    assert cache.tiers[0].counters.hits == 3
    cache.close()
    again = make_cache()
    assert again.read(ref) == data
    assert again.origin.counters.fetches == 0
    ram, disk = again.tiers
    assert disk.counters.hits == 3 and ram.counters.promotions == 3


def test_ram_overflow_demotes_to_disk_instead_of_dropping(make_cache, source) -> None:
    [(ref, data)] = put_objects(source, [1000])
    cache = make_cache()
    ram, disk = cache.tiers
    cache.read(ref)
    page = page_key(ref, 1024, 0)
    disk.delete(page)  # e.g. refused earlier by a full disk
    assert ram.evict_to(0) == 1
    assert disk.contains(page) and disk.counters.demotions == 1
    assert cache.read(ref) == data and cache.origin.counters.fetches == 1


def test_concurrent_misses_of_one_page_merge_into_one_fetch(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [1000])
    cache, gated = gated_cache(tmp_path, source)
    gated.gate.clear()
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(cache.read(ref))) for _ in range(8)]
    for t in threads:
        t.start()
    assert gated.arrived.acquire(timeout=10)
    wait_for(lambda: cache._flight.merged == 7, what="7 readers waiting on the first one's fetch")
    gated.gate.set()
    for t in threads:
        t.join(10)
    assert results == [data] * 8 and gated.reads == 1
    cache.close()


def test_origin_parallelism_is_bounded(tmp_path: Path, source) -> None:
    objects = put_objects(source, [1000] * 8)
    cache, gated = gated_cache(tmp_path, source, concurrency=2)
    gated.gate.clear()
    threads = [threading.Thread(target=cache.read, args=(ref,)) for ref, _ in objects]
    for t in threads:
        t.start()
    assert gated.arrived.acquire(timeout=10) and gated.arrived.acquire(timeout=10)
    assert not gated.arrived.acquire(timeout=0.3)  # a third read would be a bug; timing cannot make it pass
    gated.gate.set()
    for t in threads:
        t.join(10)
    assert gated.reads == 8 and gated.max_active == 2
    cache.close()


def test_the_constructor_only_keeps_its_parts_and_start_connects_them(tmp_path: Path, source, stores) -> None:
    """``TieredCache(...)`` starts no thread and touches no tier; ``assemble_cache`` builds the
    prefetcher and hint workers around it and ``start`` hooks the tiers and runs the maintainer."""
    [(ref, data)] = put_objects(source, [2500])
    tiers = [
        RamTier(1 << 20, make_policy("lru", 1 << 20)),
        DiskTier(tmp_path / "d", 1 << 20, make_policy("lru", 1 << 20)),
    ]
    hooks = [(t.on_evict, t.wake_evictor, t.is_pinned) for t in tiers]
    threads = set(threading.enumerate())
    bare = TieredCache(
        tiers,
        Origin(stores),
        flight=SingleFlight(),
        page_size=1024,
        prefetch_concurrency=1,
        activity=ReaderActivity(0, 4096),
    )
    assert set(threading.enumerate()) == threads
    assert [(t.on_evict, t.wake_evictor, t.is_pinned) for t in tiers] == hooks
    bare.close()  # a cache that never started closes its tiers all the same
    tiers = [
        RamTier(1 << 20, make_policy("lru", 1 << 20)),
        DiskTier(tmp_path / "e", 1 << 20, make_policy("lru", 1 << 20)),
    ]
    with assemble_cache(tiers, Origin(stores), page_size=1024, prefetch_concurrency=1) as cache:
        assert any(t.name == "datahub-cache-maintain" for t in threading.enumerate())
        assert tiers[0].on_evict == cache._demote and tiers[1].is_pinned == cache.pins.holds
        assert cache.read(ref) == data


class BrokenRam(RamTier):
    def _load(self, key):
        raise OSError("simulated tier failure")

    def _store(self, key, data):
        raise OSError("simulated tier failure")


def test_a_failing_tier_is_a_logged_miss_never_a_failed_read(tmp_path: Path, source, stores, caplog) -> None:
    [(ref, data)] = put_objects(source, [2500])
    tiers = [
        BrokenRam(1 << 20, make_policy("lru", 1 << 20)),
        DiskTier(tmp_path / "d", 1 << 20, make_policy("lru", 1 << 20)),
    ]
    cache = assemble_cache(tiers, Origin(stores), page_size=1024)
    assert cache.read(ref) == data
    assert cache.read(ref) == data
    assert tiers[0].counters.errors >= 3 and cache.origin.counters.fetches == 3  # second read: disk
    assert "simulated tier failure" in caplog.text
    cache.close()


def test_missing_objects_raise_object_not_found(make_cache, source) -> None:
    cache = make_cache()
    with pytest.raises(ObjectNotFound):
        cache.read(ObjectRef(source.url_for("nope.bin"), "etag", 10))


def test_an_unusable_disk_directory_leaves_a_working_cache(make_cache, source, tmp_path, caplog) -> None:
    [(ref, data)] = put_objects(source, [2000])
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    cache = make_cache(disk_dir=str(blocker / "disk"))
    assert [t.name for t in cache.tiers] == ["ram"]
    assert "running without a disk tier" in caplog.text
    assert cache.read(ref) == data and cache.read(ref) == data


def test_read_cached_answers_only_from_ram_without_io(make_cache, source) -> None:
    """What the FUSE daemon answers inline: RAM-held one-page objects, else None (no fetch)."""
    (small, small_data), (big, _big_data) = put_objects(source, [1000, 5000])
    cache = make_cache()
    assert cache.read_cached(small) is None and cache.origin.counters.fetches == 0  # not fetched by it
    assert cache.read(small) == small_data
    assert cache.read_cached(small) == small_data
    assert cache.read_cached(small, 10, 20) == small_data[10:30]
    assert cache.read_cached(small, 990, 100) == small_data[990:]
    cache.read(big)
    assert cache.read_cached(big) is None  # several pages: streams and readahead must see the read
    cache.tiers[0].delete(page_key(small, 1024, 0))  # only on disk now: that is I/O
    assert cache.read_cached(small) is None and cache.origin.counters.fetches == 6


def test_a_page_stored_between_a_miss_and_the_fetch_is_not_fetched_again(tmp_path: Path, source) -> None:
    """A stream delivers a page (fastest tier, then its claim settled) between a reader's
    miss and the reader's own fetch: the reader takes the delivered page, no second GET."""
    [(ref, data)] = put_objects(source, [2048])
    ram = RamTier(1 << 20, make_policy("lru", 1 << 20))
    cache = assemble_cache([ram], Origin(OneStoreRegistry(source, str(source.root))), page_size=1024)
    k = page_key(ref, 1024, 1)
    get = ram.get
    delivered = []

    def get_then_deliver(page_key: PageKey) -> bytes | None:
        got = get(page_key)
        if page_key == k and not delivered:
            delivered.append(True)
            assert ram.put(k, data[1024:], hot=True)  # the stream's delivery lands now
        return got

    ram.get = get_then_deliver  # type: ignore[method-assign]
    with cache:
        assert cache.read(ref, 1024, 1024) == data[1024:]
        assert delivered and cache.origin.counters.snapshot()["fetches"] == 0
