"""Streams of large objects: one streaming origin read per sequential reader, cut into
exact pages that waiting readers share; early stop and close cancel the request; a changed
object fails the readers with ObjectChanged and stores nothing of the new bytes; repeated
random reads start one background whole-object fill that never holds up a random reader.

The origin is a real local directory store behind ``StreamingStore``, which serves
``read_chunks`` from one counted request in small chunks (each chunk read under the etag,
so a replacement mid-stream is seen), and can hold the stream at a gate.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.cache import DiskTier, RamTier, TieredCache, assemble_cache, make_policy, open_cache
from datahub.cache import stream as stream_mod
from datahub.cache.origin import Origin
from datahub.cache.pages import page_key
from datahub.config import load_config
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectInfo, ObjectStore
from tests.cache.conftest import OneStoreRegistry, put_objects, wait_for, with_cache
from tests.faults import FlakyProxy

PAGE = 1024
CHUNK = 700  # not a divisor of the page: pages are cut across chunk boundaries


class StreamingStore(ObjectStore):
    """A real store whose ``read_chunks`` is one request streamed in CHUNK-byte pieces."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.root_url = inner.root_url
        self.root = inner.root
        self.requests = 0  # read() calls plus read_chunks() streams
        self.gate = threading.Event()
        self.gate.set()
        self.hold_after = -1  # with the gate clear: chunks yielded before holding
        self.held = threading.Event()
        self.closed_early = 0  # streams whose consumer stopped before the end
        self._lock = threading.Lock()

    def read(self, key: str, start: int = 0, end: int | None = None, etag: str | None = None) -> bytes:
        with self._lock:
            self.requests += 1
        return self.inner.read(key, start, end, etag)

    def read_chunks(self, key, start=0, end=None, etag=None, chunk_size=1 << 20) -> Iterator[bytes]:
        with self._lock:
            self.requests += 1
        size = self.inner.stat(key).size  # a range past the object ends at its end, as on every store
        end = size if end is None else min(end, size)
        pos, sent = start, 0
        try:
            while pos < end:
                if sent == self.hold_after and not self.gate.is_set():
                    self.held.set()
                    assert self.gate.wait(30), "test gate never opened"
                piece = self.inner.read(key, pos, min(end, pos + CHUNK), etag)
                pos += len(piece)
                sent += 1
                yield piece
        except GeneratorExit:
            with self._lock:
                self.closed_early += 1
            raise

    def hold(self, after_chunks: int) -> None:
        self.hold_after = after_chunks
        self.held.clear()
        self.gate.clear()

    def list(self, prefix: str = "", start_after: str = ""):
        return self.inner.list(prefix, start_after)

    def stat(self, key: str) -> ObjectInfo:
        return self.inner.stat(key)

    def put(self, key, data, size=None) -> ObjectInfo:
        return self.inner.put(key, data, size)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def url_for(self, key: str) -> str:
        return self.inner.url_for(key)


class OnePieceStore(StreamingStore):
    """The same store with the contract's default ``read_chunks``: one ``read`` per range."""

    read_chunks = ObjectStore.read_chunks


def streaming_cache(
    tmp_path: Path, source, *, streams: bool = True, **options
) -> tuple[TieredCache, StreamingStore]:
    store = StreamingStore(source) if streams else OnePieceStore(source)
    tiers = [
        RamTier(1 << 20, make_policy("lru", 1 << 20)),
        DiskTier(tmp_path / "disk", 1 << 20, make_policy("lru", 1 << 20)),
    ]
    options = {
        "page_size": PAGE,
        "readahead_bytes": 4 * PAGE,
        "stream_min_bytes": 1,
        **options,
    }
    cache = assemble_cache(tiers, Origin(OneStoreRegistry(store, str(source.root))), **options)
    return cache, store


def read_all(cache: TieredCache, ref, chunk: int) -> bytes:
    return b"".join(cache.read(ref, off, chunk) for off in range(0, ref.size, chunk))


def idle(cache: TieredCache) -> None:
    wait_for(lambda: cache.stats()["streams"]["running"] == 0, what="stream threads to end")
    assert cache._prefetcher.streams.writer.drain(), "streamed pages never reached the disk tier"


def test_sequential_read_is_one_streaming_request_with_exact_pages(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [40 * PAGE + 123], seed=11)
    cache, store = streaming_cache(tmp_path, source)
    with cache:
        assert read_all(cache, ref, PAGE // 2) == data
        idle(cache)
        # a read from offset 0 starts the stream at once: ONE request for all 41 pages
        assert store.requests == 1
        streams = cache.stats()["streams"]
        assert streams["sequential"] == 1 and streams["requests"] == 1 and streams["failed"] == 0
        assert streams["pages"] == 41 and streams["bytes"] == len(data)
        assert cache.origin.counters.fetches == 1 and cache.origin.counters.streams == 1
        disk = cache.tiers[1]  # every streamed page was written through to the disk tier too
        assert all(disk.contains(page_key(ref, PAGE, i)) for i in range(41))
        assert read_all(cache, ref, 3000) == data  # served from the tiers
        assert store.requests == 1


def test_stream_never_downloads_pages_another_fetch_has(tmp_path: Path, source) -> None:
    """Pages some tier holds, or another fetch (a warm-up, a reader) has in flight, are
    skipped by ending the request and resuming after them: every byte comes once."""
    [(ref, data)] = put_objects(source, [20 * PAGE], seed=31)
    cache, store = streaming_cache(tmp_path, source, fill_whole_object_max=0)
    with cache:
        assert cache.read(ref, 6 * PAGE, 4 * PAGE) == data[6 * PAGE : 10 * PAGE]  # pages 6-9 held
        flight = cache._flight
        held_elsewhere = flight.claim(page_key(ref, PAGE, 14))  # page 14 "in flight"
        reader = threading.Thread(
            target=lambda: got.append(
                b"".join(cache.read(ref, off, PAGE, reader="a") for off in range(0, 20 * PAGE, PAGE))
            )
        )
        got: list[bytes] = []
        reader.start()
        wait_for(
            lambda: (
                flight.in_flight(page_key(ref, PAGE, 13)) is False
                and cache.tiers[0].contains(page_key(ref, PAGE, 13))
            ),
            what="page 13",
        )
        flight.settle(page_key(ref, PAGE, 14), held_elsewhere, value=data[14 * PAGE : 15 * PAGE])
        reader.join(30)
        assert got == [data]
        idle(cache)
        # page 14 came from the other fetch, pages 6-9 from the first read: never streamed
        # again (the two requests that ended early wasted at most the chunk in transit)
        assert len(data) - PAGE <= cache.origin.counters.bytes < len(data) - PAGE + 2 * CHUNK
        streams = cache.stats()["streams"]
        assert streams["skipped"] == 0 and streams["requests"] == 3  # from pages 0, 10 and 15


def test_a_fill_skips_a_stretch_others_fetch_but_not_scattered_pages(tmp_path: Path, source) -> None:
    """A fill receives a random reader's scattered pages again (a request each would cost
    more) but ends its request before a stretch others hold (e.g. a warm-up's)."""
    [(ref, data)] = put_objects(source, [40 * PAGE], seed=33)
    cache, store = streaming_cache(tmp_path, source, fill_after_random_reads=2)
    with cache:
        store.hold(after_chunks=1)
        assert cache.read(ref, 30 * PAGE, 1) == data[30 * PAGE : 30 * PAGE + 1]
        assert cache.read(ref, 5 * PAGE, 1) == data[5 * PAGE : 5 * PAGE + 1]  # the fill starts, stalls
        assert store.held.wait(10)
        assert cache.read(ref, 10 * PAGE, 6 * PAGE, reader="w") == data[10 * PAGE : 16 * PAGE]  # a stretch
        store.gate.set()
        idle(cache)
        streams = cache.stats()["streams"]
        # one request up to page 10, one after the stretch: pages 5 and 30 received again
        assert streams["fills"] == 1 and streams["requests"] == 2 and streams["skipped"] == 2
        assert read_all(cache, ref, PAGE) == data
        assert cache.origin.counters.bytes < len(data) + 2 * PAGE + CHUNK


def test_reads_slightly_out_of_order_stay_sequential(tmp_path: Path, source) -> None:
    """The kernel sends a sequential reader's reads out of order (its own readahead, from
    several threads): that reader keeps its one stream, and nothing counts as random."""
    [(ref, data)] = put_objects(source, [24 * PAGE], seed=32)
    cache, store = streaming_cache(tmp_path, source, fill_after_random_reads=2)
    order = [0, 1, 3, 2, 4, 6, 5, 7, 9, 8, 10, 11, 13, 12, 14, 15, 17, 16, 18, 19, 21, 20, 22, 23]
    with cache:
        got = {page: cache.read(ref, page * PAGE, PAGE) for page in order}
        assert b"".join(got[p] for p in range(24)) == data
        idle(cache)
        streams = cache.stats()["streams"]
        assert streams["sequential"] == 1 and streams["stopped"] == 0 and streams["fills"] == 0
        assert store.requests == 1 and cache.origin.counters.bytes == len(data)


def test_stream_stays_within_its_window_of_the_reader(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [40 * PAGE], seed=12)
    cache, store = streaming_cache(tmp_path, source, readahead_bytes=3 * PAGE)
    with cache:
        assert cache.read(ref, 0, PAGE) == data[:PAGE]  # from offset 0: streamed at once
        assert cache.read(ref, PAGE, PAGE) == data[PAGE : 2 * PAGE]
        ram = cache.tiers[0]
        wait_for(lambda: cache.stats()["streams"]["pages"] == 5, what="the window: pages 0..4")
        assert all(ram.contains(page_key(ref, PAGE, i)) for i in range(5))
        assert not ram.contains(page_key(ref, PAGE, 5))  # reader at page 1, window 3
        assert read_all(cache, ref, 900) == data
        assert store.requests == 1


def test_fallback_store_is_streamed_in_bounded_segments(tmp_path: Path, source, monkeypatch) -> None:
    monkeypatch.setattr(stream_mod, "SEGMENT_BYTES", 8 * PAGE)
    [(ref, data)] = put_objects(source, [40 * PAGE - 5], seed=13)
    cache, store = streaming_cache(tmp_path, source, streams=False, readahead_bytes=16 * PAGE)
    with cache:
        assert read_all(cache, ref, PAGE // 2) == data
        idle(cache)
        assert store.requests == 5  # pages 0..39 in segments of 8 pages


def test_jumping_away_stops_the_stream_and_its_waiters_fetch_themselves(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [40 * PAGE], seed=14)
    cache, store = streaming_cache(tmp_path, source)
    with cache:
        store.hold(after_chunks=3)  # the stream delivers pages 0 and 1 (3 chunks of 700) and stalls
        assert cache.read(ref, 0, PAGE) == data[:PAGE]  # starts the stream, waits for page 0
        assert cache.read(ref, PAGE, 10) == data[PAGE : PAGE + 10]
        assert store.held.wait(10)
        got: list[bytes] = []
        waiter = threading.Thread(target=lambda: got.append(cache.read(ref, 3 * PAGE, PAGE)))
        waiter.start()  # page 3 is claimed by the stalled stream: the waiter waits for it
        wait_for(lambda: cache.stats()["merged_fetches"] >= 1, what="the waiter to join the stream")
        assert cache.read(ref, 30 * PAGE, PAGE) == data[30 * PAGE : 31 * PAGE]  # a jump: the stream stops
        waiter.join(10)
        assert got == [data[3 * PAGE : 4 * PAGE]]  # fetched by the waiter itself, gate still closed
        assert cache.stats()["streams"]["stopped"] == 1
        store.gate.set()
        idle(cache)
        assert store.closed_early == 1  # the request was given up, not read to the end
        assert read_all(cache, ref, PAGE) == data


def test_close_cancels_a_running_stream(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [40 * PAGE], seed=15)
    cache, store = streaming_cache(tmp_path, source)
    store.hold(after_chunks=3)
    assert cache.read(ref, 0, PAGE) == data[:PAGE]
    assert cache.read(ref, PAGE, PAGE) == data[PAGE : 2 * PAGE]
    assert store.held.wait(10)
    closer = threading.Thread(target=cache.close)
    closer.start()
    wait_for(lambda: cache._prefetcher.streams.counters.stopped == 1, what="close to stop the stream")
    store.gate.set()
    closer.join(10)
    assert not closer.is_alive()
    assert store.closed_early == 1
    assert cache._prefetcher.streams.stats()["running"] == 0


def test_idle_reader_ends_the_stream(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [40 * PAGE], seed=16)
    cache, store = streaming_cache(tmp_path, source, stream_idle_seconds=0.05)
    with cache:
        assert cache.read(ref, 0, PAGE) == data[:PAGE]
        idle(cache)  # the reader stopped at page 0: the stream gives up after its window
        assert cache.stats()["streams"]["stopped"] == 1 and store.closed_early == 1
        assert cache.stats()["streams"]["pages"] == 5  # pages 0..4: reader at page 0, window 4


def test_object_changed_mid_stream_fails_readers_and_stores_nothing_new(tmp_path: Path, source) -> None:
    [(ref, old)] = put_objects(source, [40 * PAGE], seed=17)
    cache, store = streaming_cache(tmp_path, source, readahead_bytes=8 * PAGE)
    with cache:
        store.hold(after_chunks=4)  # pages 1..2 arrive, then the stream stalls
        got = [cache.read(ref, 0, PAGE), cache.read(ref, PAGE, PAGE)]
        assert store.held.wait(10)
        source.put("obj/00000.bin", b"N" * len(old))  # replaced behind the snapshot
        store.gate.set()
        with pytest.raises(ObjectChanged):
            for off in range(2 * PAGE, len(old), PAGE):
                got.append(cache.read(ref, off, PAGE))
        prefix = b"".join(got)
        assert prefix == old[: len(prefix)] and len(prefix) < len(old)
        idle(cache)
        assert cache.stats()["streams"]["failed"] >= 1  # a reader may have started a second one
        for i in range(40):  # each page is the snapshot's bytes or ObjectChanged, never new bytes
            try:
                assert cache.read(ref, i * PAGE, PAGE) == old[i * PAGE : (i + 1) * PAGE]
            except ObjectChanged:
                pass


def test_random_reads_start_one_fill_and_later_reads_are_hits(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [64 * PAGE + 9], seed=18)
    cache, store = streaming_cache(tmp_path, source, fill_after_random_reads=3)
    with cache:
        for page in (50, 10, 33):
            assert cache.read(ref, page * PAGE + 1, 100) == data[page * PAGE + 1 : page * PAGE + 101]
        wait_for(lambda: cache.stats()["streams"]["fills"] == 1, what="the fill to start")
        idle(cache)
        streams = cache.stats()["streams"]
        assert streams["requests"] == 1 and streams["pages"] == 62 and streams["skipped"] == 3
        assert store.requests == 4  # three random reads, one fill (receiving but skipping 10, 33, 50)
        for page in (7, 64, 0, 41, 50, 13):
            assert cache.read(ref, page * PAGE, PAGE) == data[page * PAGE : (page + 1) * PAGE]
        assert store.requests == 4


def test_random_reader_does_not_wait_behind_a_fill(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [64 * PAGE], seed=19)
    cache, store = streaming_cache(tmp_path, source, fill_after_random_reads=2)
    with cache:
        store.hold(after_chunks=1)
        cache.read(ref, 40 * PAGE, 1)
        cache.read(ref, 20 * PAGE, 1)  # the fill starts and stalls inside page 0
        assert store.held.wait(10)
        assert cache.read(ref, 60 * PAGE, PAGE) == data[60 * PAGE : 61 * PAGE]  # at once, own fetch
        assert cache.stats()["streams"]["active_fills"] == 1
        store.gate.set()
        idle(cache)
        assert read_all(cache, ref, 5000) == data
        assert store.requests == 4


def test_small_objects_and_disabled_streams_use_readahead_runs(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [20 * PAGE], seed=20)
    cache, store = streaming_cache(tmp_path, source, stream_min_bytes=21 * PAGE)
    with cache:
        assert read_all(cache, ref, PAGE) == data
        assert cache.stats()["streams"]["sequential"] == 0
        assert cache.stats()["readahead"]["submitted"] >= 1


@pytest.fixture
def moto_config(tmp_path: Path, moto_endpoint):
    config = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    return with_cache(
        config,
        page_size=64 * 1024,
        ram_bytes=8 << 20,
        disk_bytes=8 << 20,
        stream_min_bytes=1 << 20,
        readahead_bytes=512 * 1024,
    )


def test_sequential_read_from_s3_takes_a_few_gets(moto_config, moto_endpoint) -> None:
    bucket = moto_endpoint.new_bucket("stream")
    with StoreRegistry(moto_config) as registry:
        [(ref, data)] = put_objects(registry.store(f"s3://{bucket}"), [2 * 2**20 + 77], seed=21)
    with FlakyProxy(moto_endpoint.url) as proxy:
        config = moto_config.model_copy(
            update={"s3": moto_config.s3.model_copy(update={"endpoint_url": proxy.url})}
        )
        with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
            before = len(proxy.requests)
            assert read_all(cache, ref, 128 * 1024) == data
            idle(cache)
            gets = [r for r in proxy.requests[before:] if r[0] == "GET"]
            assert len(gets) <= 3, gets  # page 0, then one stream (or one segment)
            assert cache.stats()["streams"]["sequential"] == 1


def test_streams_beyond_the_limit_fall_back_to_readahead_runs(tmp_path: Path, source) -> None:
    (ref_a, data_a), (ref_b, data_b) = put_objects(source, [30 * PAGE, 30 * PAGE], seed=22)
    cache, store = streaming_cache(tmp_path, source, max_streams=1)
    with cache:
        store.hold(after_chunks=3)  # the first reader's stream delivers pages 0..1, stays open
        assert cache.read(ref_a, 0, PAGE) == data_a[:PAGE]
        assert cache.read(ref_a, PAGE, PAGE) == data_a[PAGE : 2 * PAGE]
        assert store.held.wait(10)
        assert read_all(cache, ref_b, PAGE // 2) == data_b  # no second stream: runs instead
        streams = cache.stats()["streams"]
        assert streams["sequential"] == 1 and streams["active"] == 1
        assert cache.stats()["readahead"]["submitted"] >= 1
        store.gate.set()
        assert read_all(cache, ref_a, PAGE) == data_a


def test_no_fill_for_an_object_bigger_than_half_the_largest_tier(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [600 * PAGE], seed=23)  # tiers hold 1 MiB each
    cache, store = streaming_cache(tmp_path, source, fill_after_random_reads=2)
    with cache:
        for page in (500, 20, 300, 7, 450, 99):
            assert cache.read(ref, page * PAGE, 10) == data[page * PAGE : page * PAGE + 10]
        assert cache.stats()["streams"]["fills"] == 0 and store.requests == 6


def test_inline_reads_of_a_streamed_object_keep_the_stream_going(tmp_path: Path, source) -> None:
    """The FUSE daemon's pattern: ``read_cached`` first (inline, RAM only), ``read`` if None.
    Inline reads tell the stream where the reader is, so it never stalls at its window."""
    [(ref, data)] = put_objects(source, [60 * PAGE + 77], seed=21)
    cache, store = streaming_cache(tmp_path, source, readahead_bytes=3 * PAGE)
    with cache:
        out, inline = [], 0
        for off in range(0, ref.size, PAGE // 4):
            got = cache.read_cached(ref, off, PAGE // 4)
            if got is None:
                got = cache.read(ref, off, PAGE // 4)
                if off >= PAGE:  # let the stream fill its window, so later reads find RAM pages
                    wait_for(lambda o=off: cache.stats()["streams"]["pages"] >= min(61, o // PAGE + 4))
            else:
                inline += 1
            out.append(bytes(got))
        assert b"".join(out) == data
        assert inline > 100, "reads of pages already in RAM were not answered inline"
        idle(cache)
        assert store.requests == 1 and cache.stats()["streams"]["failed"] == 0


def test_no_inline_answer_for_a_large_object_without_a_stream(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [8 * PAGE], seed=22)
    cache, _store = streaming_cache(tmp_path, source, stream_min_bytes=0)
    with cache:
        assert read_all(cache, ref, PAGE) == data  # every page now in RAM
        assert cache.read_cached(ref, 0, PAGE) is None  # readahead must see every read
        small = put_objects(source, [PAGE // 2], seed=23)[0]
        assert cache.read(small[0]) == small[1] and cache.read_cached(small[0], 0, 10) == small[1][:10]


def test_claiming_returns_only_once_the_pages_another_thread_claims_are_decided(
    tmp_path: Path, source
) -> None:
    """A reader claims up to its window, then reads. A page the stream's thread is in the
    middle of claiming (taken, not yet registered: the thread was preempted) is not yet the
    stream's: a reader that went on would fetch it itself and cut the stream's request
    (seen under load: two extra GETs). So the reader's claiming waits for that decision."""
    [(ref, _)] = put_objects(source, [24 * PAGE], seed=34)
    cache, _ = streaming_cache(tmp_path, source)
    streams = cache._prefetcher.streams
    stream = stream_mod.PageStream(streams, ref, 0, fill=False, reader_page=8)
    with stream._lock:  # the thread took page 13 and was preempted before registering it
        stream._claim_next = 14
        stream._claiming.add(13)
    returned = threading.Event()
    reader = threading.Thread(target=lambda: (stream._claim_upto(14), returned.set()))
    reader.start()
    assert not returned.wait(0.3), "the reader went on while page 13's claim was undecided"
    with stream._lock:  # the thread registers its claim
        stream._claims[13] = streams.flight.claim(stream.key(13), stream.ticket)
        stream._claiming.discard(13)
        stream._lock.notify_all()
    assert returned.wait(10)
    reader.join()
    stream.stop()
    cache.close()
