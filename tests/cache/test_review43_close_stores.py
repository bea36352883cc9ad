"""review43: a cache closing while a page is being stored leaves no page file its index misses.

An unmount closes the mount's cache (``fuse_adapter.mount_assembly``: ``stop`` then
``source.close()``) while warm-up workers and readers may still be storing pages they fetched
just before. The disk tier's close flushed its batched index inserts and closed the index; a
store under way then linked its page file and added its entry to a batch nobody flushed. The
index had been closed cleanly, so the next process trusted it: the file was counted by no
tier and evicted by none (found with ``TieredCache.prefetch`` cancelled and closed at a random
moment: 1 page file of 117 in 15 runs of 400 objects; ``datahub.cache.indexbatch`` promises "a
clean close flushes first"). Now the tier admits nothing once closing and waits for the stores
under way (``BudgetedTier.stop_storing``).

The store here is held by a gate right after its page file is linked (the place the race
needs a thread to be); no timing is relied on: the test waits for the close either to have
finished (the base) or to be waiting for that store (the fix), then lets the store go on.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from datahub.cache import DiskTier, open_cache
from datahub.cache.index import open_index
from datahub.cache.pagefile import PageWriter
from datahub.cache.pages import page_key
from datahub.storage import StoreRegistry
from tests.cache.conftest import local_origin_cache, wait_for


def _unindexed_page_files(disk_dir: Path) -> tuple[set[str], bool]:
    """Digests of page files the (reopened) index does not list, and whether it is trusted."""
    files = {p.name.removesuffix(".page") for p in (disk_dir / "pages").glob("*/*.page")}
    index = open_index(disk_dir / "index")
    try:
        trusted = index.attach()
        known = {key.digest for key, _size in index.entries()}
    finally:
        index.close()
    return files - known, trusted


def test_a_page_stored_while_the_cache_closes_is_indexed_or_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with local_origin_cache(tmp_path, [3000], seed=43) as (config, stores, objects):
        [(ref, data)] = objects
        linked, gate = threading.Event(), threading.Event()
        real_write = PageWriter.write

        def write(self, key, page, **kwargs):  # the page file is in place; its index entry is not yet
            state = real_write(self, key, page, **kwargs)
            linked.set()
            assert gate.wait(60), "test gate never opened"
            return state

        monkeypatch.setattr(PageWriter, "write", write)
        cache = open_cache(config, stores)
        disk = next(t for t in cache.tiers if isinstance(t, DiskTier))
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(bytes(cache.read(ref))))
        reader.start()
        assert linked.wait(60), "the read never stored its page"
        closer = threading.Thread(target=cache.close)
        closer.start()
        # the base: the close is over, the store still to finish; the fix: the close waits for it
        wait_for(lambda: not closer.is_alive() or getattr(disk, "_closing", False), what="the close")
        gate.set()
        reader.join(60)
        closer.join(60)
        assert not reader.is_alive() and not closer.is_alive()
        assert got == [data]  # the reader's bytes, whatever the tier did with them
        monkeypatch.undo()
        unindexed, trusted = _unindexed_page_files(Path(config.resolved_disk_dir))
        assert trusted, "the cache was closed cleanly: its index is trusted by the next process"
        assert not unindexed, (
            f"page files no index entry counts ({sorted(unindexed)}): no tier accounts for them, "
            "eviction never removes them"
        )
        # and the next process reads it from the disk tier, or fetches it again: right bytes
        with StoreRegistry(config) as again, open_cache(config, again) as reopened:
            assert reopened.read(ref) == data


def test_a_closing_tier_admits_no_page(tmp_path: Path) -> None:
    """Once closing, a fill that arrives is refused (counted), not written behind the index."""
    with local_origin_cache(tmp_path, [3000, 5000], seed=431) as (config, stores, objects):
        cache = open_cache(config, stores)
        disk = next(t for t in cache.tiers if isinstance(t, DiskTier))
        (ref, data), (other, _) = objects
        assert cache.read(ref) == data
        assert disk.stop_storing(timeout=10)  # nothing under way: at once
        assert disk.put(page_key(other, cache.page_size, 0), b"y" * other.size) is False
        assert disk.stats()["rejected"] >= 1
        cache.close()
        unindexed, trusted = _unindexed_page_files(Path(config.resolved_disk_dir))
        assert trusted and not unindexed
