"""fork26: DataLoader workers (start method "fork") and the cache: closed at exit, and never
the parent's.

A worker (start method "fork", ``persistent_workers=False``) opens its own cache on first
read and ends with ``os._exit`` after multiprocessing's finalizers: no ``atexit`` hook runs.
Its cache was never closed: its claim on the disk index stayed behind (a dead holder) and its
batched index inserts were lost, so every epoch's new workers rebuilt the index from the page
files. The cache now closes through ``datahub.procs.at_exit``, which runs in both exits.
"""

from __future__ import annotations

import os

import pytest

from datahub.catalog import Put, Record, open_catalog
from datahub.storage import StoreRegistry
from tests.cache.conftest import put_objects, with_cache
from tests.torch.test_fork25_torch import held_fetch

N = 12
PAGE = 1024


def _raw(data, labels) -> bytes:
    return bytes(data)


@pytest.fixture
def version(config, tmp_path):
    """``ds`` v1: N files of 1-4 pages in a local directory store; 1 KiB cache pages."""
    registry = StoreRegistry(config)
    (tmp_path / "origin").mkdir()
    objects = put_objects(registry.store((tmp_path / "origin").as_uri()), [700 + 300 * i for i in range(N)])
    registry.close()
    catalog = open_catalog(config.resolved_catalog_url)
    try:
        catalog.create_dataset("ds")
        puts = [Put(Record(f"f{i:02d}", ref.url, ref.etag, ref.size)) for i, (ref, _) in enumerate(objects)]
        catalog.commit("ds", puts, message="files")
    finally:
        catalog.close()
    return with_cache(config, page_size=PAGE), [data for _, data in objects]


def _index(dataset):
    return next(t for t in dataset.source._open().tiers if t.name == "disk").index


def _holders(index) -> set[int]:
    with index._env.begin(db=index._meta) as txn:
        return {int(k[len(b"holder:") :]) for k, _ in txn.cursor() if k.startswith(b"holder:")}


def test_two_epochs_of_forked_workers_never_rebuild_the_index(version) -> None:
    from torch.utils.data import DataLoader

    from datahub.torch import CacheSource, VersionDataset

    config, data = version
    catalog = open_catalog(config.resolved_catalog_url)
    dataset = VersionDataset.from_catalog(catalog, "ds", 1, CacheSource(config), transform=_raw)
    catalog.close()
    try:
        assert dataset[0] == data[0]  # the parent's cache is open: a live holder of the index
        index = _index(dataset)
        pages = sum(-(-len(d) // PAGE) for d in data)
        for epoch in (1, 2):
            loader = DataLoader(dataset, batch_size=3, num_workers=2, multiprocessing_context="fork",
                                persistent_workers=False, collate_fn=list, timeout=120)  # fmt: skip
            got = [b for batch in loader for b in batch]
            assert got == data, f"epoch {epoch}: wrong samples"
            del loader  # its workers have exited (joined at the end of the epoch)
            left = _holders(index) - {os.getpid()}
            assert not left, f"epoch {epoch}: exited workers still hold the index: {sorted(left)}"
            dataset.source._open().tiers[1].flush_index()  # the parent's own batched inserts
            assert index.count() == pages, f"epoch {epoch}: the index lost pages the workers stored"
        assert index.rebuilds() == 0, "the second epoch's workers rebuilt the index"
        stats = next(t for t in dataset.source._open().stats()["tiers"] if t["tier"] == "disk")
        assert stats["index_rebuilds"] == 0
    finally:
        dataset.source.close()


def cache_files(cache, refs):
    """What a user writes holding the cache itself: ``open_cache`` in the parent, kept in the
    Dataset (built here: torch is imported by the tests that run, never at collection)."""
    from torch.utils.data import Dataset

    class CacheFiles(Dataset):
        def __len__(self) -> int:
            return len(refs)

        def __getitem__(self, i: int) -> bytes:
            return bytes(cache.read(refs[i]))

    return CacheFiles()


def test_dataloader_workers_over_a_cache_their_parent_opened_and_is_fetching_through(version, monkeypatch):
    """The workers read through the ``TieredCache`` the parent opened (not datahub://, not
    CacheSource) while a parent thread fetches the first object: each worker reads through a
    cache of its own, and gives its claim on the disk index back when it exits. On main the
    worker reading that object waited for the parent's fetch for ever (DataLoader timed out)."""
    from torch.utils.data import DataLoader

    from datahub.cache import open_cache

    config, data = version
    catalog = open_catalog(config.resolved_catalog_url)
    refs = [r.ref for r in catalog.list_records("ds", 1)]
    catalog.close()
    stores = StoreRegistry(config)
    cache = open_cache(config, stores)
    try:
        assert bytes(cache.read(refs[1])) == data[1]  # the parent's cache is open
        release = held_fetch(monkeypatch, lambda: bytes(cache.read(refs[0])))
        try:
            loader = DataLoader(cache_files(cache, refs), batch_size=3, num_workers=2, multiprocessing_context="fork",
                                collate_fn=list, timeout=60)  # fmt: skip
            got = [b for batch in loader for b in batch]
            del loader
        finally:
            assert release() == [data[0]]
        assert got == data
        assert _holders(next(t for t in cache.tiers if t.name == "disk").index) == {os.getpid()}
    finally:
        cache.close()
        stores.close()
