"""Coalesced readahead: a sequential reader's missing pages are fetched by runs, one
range read per run, under the object's etag; concurrent readers of those pages merge into
that read; a changed object still fails with ObjectChanged and never mixes bytes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datahub.cache import TieredCache, open_cache
from datahub.config import load_config
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry
from tests.cache.conftest import gated_cache, put_objects, wait_for, with_cache
from tests.faults import FlakyProxy

PAGE = 1024


def drained(cache: TieredCache) -> None:
    """Wait until no readahead is queued or running, so request counts are deterministic."""
    wait_for(lambda: cache.stats()["readahead"]["queued_bytes"] == 0, what="readahead to finish")


def read_sequentially(cache: TieredCache, ref, chunk: int, *, settle: bool = True) -> bytes:
    parts = []
    for off in range(0, ref.size, chunk):
        parts.append(cache.read(ref, off, chunk))
        if settle:
            drained(cache)
    return b"".join(parts)


@pytest.fixture
def moto_config(tmp_path: Path, moto_endpoint):
    config = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    return with_cache(config, page_size=PAGE, ram_bytes=1 << 20, disk_bytes=1 << 20, readahead_bytes=8 * PAGE)


def test_sequential_read_issues_one_get_per_run_not_per_page(moto_config, moto_endpoint) -> None:
    pages = 40
    bucket = moto_endpoint.new_bucket("runs")
    with StoreRegistry(moto_config) as registry:
        [(ref, data)] = put_objects(registry.store(f"s3://{bucket}"), [pages * PAGE - 123], seed=3)
    with FlakyProxy(moto_endpoint.url) as proxy:
        config = moto_config.model_copy(
            update={"s3": moto_config.s3.model_copy(update={"endpoint_url": proxy.url})}
        )
        with StoreRegistry(config) as registry, open_cache(config, registry) as cache:
            before = len(proxy.requests)
            assert read_sequentially(cache, ref, PAGE // 2) == data
            gets = [r for r in proxy.requests[before:] if r[0] == "GET"]
            # page 0 by the reader, then runs of up to 8 pages: 1 + ceil(39 / 8) = 6 GETs
            assert len(gets) <= 7, gets
            assert cache.origin.counters.fetches == len(gets)
            assert cache.origin.counters.bytes == len(data)
            # a second pass is served from the cache
            assert read_sequentially(cache, ref, 3000, settle=False) == data
            assert len([r for r in proxy.requests[before:] if r[0] == "GET"]) == len(gets)


def test_unsettled_sequential_reads_return_exact_bytes(moto_config, moto_endpoint) -> None:
    """The reader races the readahead runs (no waiting): bytes are exact whoever fetches."""
    bucket = moto_endpoint.new_bucket("race")
    with StoreRegistry(moto_config) as registry:
        objects = put_objects(registry.store(f"s3://{bucket}"), [50 * PAGE + 7, 9 * PAGE], seed=4)
        with open_cache(moto_config, registry) as cache:
            for ref, data in objects:
                assert read_sequentially(cache, ref, 700, settle=False) == data


def test_reader_of_a_page_in_a_run_merges_into_that_one_read(tmp_path: Path, source) -> None:
    [(ref, data)] = put_objects(source, [8 * PAGE], seed=5)
    cache, gated = gated_cache(tmp_path, source, readahead_bytes=4 * PAGE)
    try:
        assert cache.read(ref, 0, 512) == data[:512]
        assert gated.arrived.acquire(timeout=10)
        gated.gate.clear()
        assert cache.read(ref, 512, 512) == data[512:1024]  # sequential: run of pages 1..4
        assert gated.arrived.acquire(timeout=10), "the run never reached the origin"
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(cache.read(ref, 2 * PAGE + 5, 100)))
        reader.start()
        wait_for(lambda: cache.stats()["merged_fetches"] >= 1, what="the reader to join the run")
        gated.gate.set()
        reader.join(10)
        assert got == [data[2 * PAGE + 5 : 2 * PAGE + 105]]
        drained(cache)
        # page 0, pages 1..4 in one read (page 2's reader took no read of its own), and, as
        # that reader moved on within its window (still sequential), the next run: 5..7
        assert gated.reads == 3 and cache.origin.counters.bytes == len(data)
        assert read_sequentially(cache, ref, 512) == data
        assert gated.reads == 3
    finally:
        gated.gate.set()
        cache.close()


def test_run_failing_on_a_changed_object_fails_its_waiters(tmp_path: Path, source) -> None:
    [(ref, old)] = put_objects(source, [8 * PAGE], seed=6)
    cache, gated = gated_cache(tmp_path, source, readahead_bytes=4 * PAGE)
    try:
        assert cache.read(ref, 0, 512) == old[:512]
        assert gated.arrived.acquire(timeout=10)
        gated.gate.clear()
        cache.read(ref, 512, 512)
        assert gated.arrived.acquire(timeout=10), "the run never reached the origin"
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                cache.read(ref, 3 * PAGE, 10)
            except ObjectChanged as exc:
                errors.append(exc)

        t = threading.Thread(target=reader)
        t.start()
        wait_for(lambda: cache.stats()["merged_fetches"] >= 1, what="the reader to join the run")
        source.put("obj/00000.bin", b"N" * len(old))  # replaced while the run is held
        gated.gate.set()
        t.join(10)
        assert len(errors) == 1
        drained(cache)
        for i in range(1, 8):  # nothing of the new object was stored
            with pytest.raises(ObjectChanged):
                cache.read(ref, i * PAGE, PAGE)
        assert cache.read(ref, 0, PAGE) == old[:PAGE]
    finally:
        gated.gate.set()
        cache.close()


def test_object_changed_mid_sequential_read_never_mixes_bytes(moto_config, moto_endpoint) -> None:
    bucket = moto_endpoint.new_bucket("midread")
    with StoreRegistry(moto_config) as registry, open_cache(moto_config, registry) as cache:
        store = registry.store(f"s3://{bucket}")
        [(ref, old)] = put_objects(store, [30 * PAGE], seed=7)
        got = []
        for off in range(0, 3 * PAGE, PAGE // 2):  # some pages read, a run fetched ahead
            got.append(cache.read(ref, off, PAGE // 2))
            drained(cache)
        store.put("obj/00000.bin", bytes(len(old)))  # replaced behind the snapshot
        with pytest.raises(ObjectChanged):
            for off in range(3 * PAGE, len(old), PAGE // 2):
                got.append(cache.read(ref, off, PAGE // 2))
        prefix = b"".join(got)
        assert prefix == old[: len(prefix)] and len(prefix) < len(old)
        drained(cache)
        for i in range(30):  # each page is the snapshot's bytes or ObjectChanged, never new bytes
            try:
                assert cache.read(ref, i * PAGE, PAGE) == old[i * PAGE : (i + 1) * PAGE]
            except ObjectChanged:
                pass


def test_sequential_detection_tolerates_the_kernels_disorder_but_not_random_reads() -> None:
    """Once sequential, a reader stays so through reads one page behind or within its
    window ahead (the kernel's readahead arrives out of order); a random reader, whose
    reads happen to land near each other, never gets that slack."""
    from datahub.cache.readahead import ReaderPositions

    positions = ReaderPositions()
    kernel_order = [0, 1, 3, 2, 4, 6, 5, 8, 7, 9]
    seen = [positions.note("seq", p, p, window=4) for p in kernel_order]
    assert seen[0] == (False, False, 0) and all(s[:2] == (True, True) for s in seen[1:])
    assert [s[2] for s in seen[1:]] == [2, 4, 4, 5, 7, 7, 9, 9, 10]  # pages of the streak so far
    random_order = [7, 2, 5, 0, 3, 9]
    assert [positions.note("rnd", p, p, window=4)[1] for p in random_order] == [False] * 6
    assert positions.note("seq", 20, 20, window=4) == (True, False, 0)  # a jump ends the streak
    assert positions.note("seq", 22, 22, window=4) == (True, False, 0)  # and gives no slack after it


def test_a_late_read_several_pages_behind_keeps_a_sequential_reader_sequential() -> None:
    """The order a real mount's daemon saw under load (tests/fuse/test_readahead_once.py
    failed on it): page 2 after page 4, 6 after 8, 14 after 16. With one page of slack
    behind, page 2 ended the streak for good and the file was fetched page by page."""
    from datahub.cache.readahead import ReaderPositions

    positions = ReaderPositions()
    order = [0, 1, 4, 2, 3, 5, 8, 7, 6, 9, 11, 10, 13, 12, 16, 15, 14, 17, 19, 18]
    seen = [positions.note("fh", p, p, window=8) for p in order]
    assert [s[1] for s in seen[1:]] == [True] * (len(order) - 1)
    assert seen[-1][2] == 20  # the streak covers every page read
    # the same disorder at the start (page 1 seen before page 0) opens the file sequentially
    opened = [positions.note("fh2", p, p, window=8) for p in [1, 0, 5, 4, 3, 2, 7, 6, 9]]
    assert [s[1] for s in opened[1:]] == [True] * 8 and opened[-1][2] == 10
    assert positions.note("rnd", 5, 5, window=8)[1] is False
    assert positions.note("rnd", 0, 0, window=8)[1] is False  # far from the start: random


@settings(max_examples=200, deadline=None)
@given(
    block=st.integers(1, 4),
    window=st.integers(8, 16),
    data=st.data(),
)
def test_any_disorder_within_the_window_keeps_a_sequential_reader_sequential(
    block: int, window: int, data: st.DataObject
) -> None:
    """Pages 0 and 1 in order, then blocks of up to half a window shuffled inside: every
    read after the first is sequential and the position never moves back."""
    from datahub.cache.readahead import ReaderPositions

    positions = ReaderPositions()
    order = [0, 1]
    for b in range(2, 40, block):
        order += data.draw(st.permutations(list(range(b, min(b + block, 40)))))
    seen = [positions.note("fh", p, p, window=window) for p in order]
    assert all(s[1] for s in seen[1:])
    assert seen[-1][2] == 40


def test_readers_of_one_object_are_told_apart_by_identity(tmp_path: Path, source) -> None:
    """Two handles reading one object sequentially, interleaved, are two sequential readers
    (each gets readahead); without identities the same reads look random."""
    [(ref, data)] = put_objects(source, [64 * PAGE], seed=41)
    for readers, expect_runs in ((("a", "b"), True), ((None, None), False)):
        cache, _gated = gated_cache(tmp_path / str(expect_runs), source, readahead_bytes=4 * PAGE)
        with cache:
            for i in range(8):
                for reader, start in zip(readers, (0, 32), strict=True):
                    off = (start + i) * PAGE
                    assert cache.read(ref, off, PAGE, reader=reader) == data[off : off + PAGE]
            drained(cache)
            assert (cache.stats()["readahead"]["submitted"] > 0) is expect_runs


def test_a_sequential_readers_runs_grow_from_the_initial_window(tmp_path: Path, source, monkeypatch) -> None:
    """The first runs are small (the reader's next page is not held up by one long GET);
    then each covers about what the reader has read so far, up to readahead_bytes."""
    from datahub.cache import prefetcher

    monkeypatch.setattr(prefetcher, "INITIAL_RUN_BYTES", 2 * PAGE)
    [(ref, data)] = put_objects(source, [64 * PAGE], seed=43)
    cache, gated = gated_cache(tmp_path, source, readahead_bytes=16 * PAGE)
    pages: list[int] = []
    inner = gated.read

    def counted(key, start=0, end=None, etag=None):
        # the object's pages a read asks for (a range that reaches the record's end asks one
        # byte past it, datahub.cache.origin.read_range: not a page more)
        pages.append(-(-(min(ref.size, ref.size if end is None else end) - start) // PAGE))
        return inner(key, start, end, etag)

    monkeypatch.setattr(gated, "read", counted)
    with cache:
        assert read_sequentially(cache, ref, PAGE) == data  # drained after every read
    assert pages[:2] == [1, 1]  # pages 0 and 1 by the reader itself: then it is sequential
    runs = pages[2:]
    assert runs[0] == 2 and max(runs) == 16  # from the initial window to readahead_bytes
    growing = all(a <= b for a, b in zip(runs[:-2], runs[1:-1], strict=True))  # the last: cut by the end
    assert growing, runs
    assert sum(pages) == 64 and cache.origin.counters.bytes == len(data)  # each page once
