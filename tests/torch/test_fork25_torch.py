"""fork25: torch DataLoader workers (start method "fork") over a cache their parent opened.

Over ``datahub://`` (a Dataset holding the fsspec file system) and over
``VersionDataset`` with ``CacheSource``: the parent reads first (its cache is open, its
claim on the disk index registered) and has a fetch in flight when the workers fork. The
workers read every sample's bytes, none waits on the parent's fetch, and the parent's claim
stays registered.
"""

from __future__ import annotations

import os
import threading

import pytest

from datahub.catalog import Put, Record, open_catalog
from datahub.fs import DatahubFileSystem
from datahub.storage import StoreRegistry
from datahub.storage.local import LocalStore
from tests.cache.conftest import put_objects, with_cache
from tests.cache.test_fork25 import holders

N = 8


@pytest.fixture
def version(config, tmp_path):
    """``ds`` v1: N files of 1-4 pages in a local directory store; 1 KiB cache pages."""
    registry = StoreRegistry(config)
    (tmp_path / "origin").mkdir()
    objects = put_objects(registry.store((tmp_path / "origin").as_uri()), [700 + 500 * i for i in range(N)])
    registry.close()
    catalog = open_catalog(config.resolved_catalog_url)
    try:
        catalog.create_dataset("ds")
        keys = [f"f{i}" for i in range(N)]
        puts = [
            Put(Record(k, ref.url, ref.etag, ref.size)) for k, (ref, _) in zip(keys, objects, strict=True)
        ]
        catalog.commit("ds", puts, message="files")
    finally:
        catalog.close()
    return with_cache(config, page_size=1024), [data for _, data in objects]


def torch_data():
    """torch's ``DataLoader`` and ``Dataset``, imported by the tests that run them: imported at
    the top, every worker's collection of this module paid ``import torch`` (1-3 CPU-s;
    tests/test_collect21_lazy_torch.py)."""
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader, Dataset

    return DataLoader, Dataset


def fs_files(fs: DatahubFileSystem):
    """What a user writes over ``datahub://``: one file system, read in ``__getitem__``."""
    _, Dataset = torch_data()

    class FsFiles(Dataset):
        def __init__(self, fs: DatahubFileSystem) -> None:
            self.fs = fs

        def __len__(self) -> int:
            return N

        def __getitem__(self, i: int) -> bytes:
            return self.fs.cat(f"ds@1/f{i}")

    return FsFiles(fs)


def _raw(data, labels) -> bytes:
    return bytes(data)


def with_tiers(dataset):
    """A sample and the tiers of the cache that read it (in the worker)."""
    _, Dataset = torch_data()

    class WithTiers(Dataset):
        def __init__(self, dataset) -> None:
            self.dataset = dataset

        def __len__(self) -> int:
            return len(self.dataset)

        def __getitem__(self, i: int) -> tuple[bytes, list[str]]:
            return self.dataset[i], [t.name for t in self.dataset.source._open().tiers]

    return WithTiers(dataset)


def held_fetch(monkeypatch, start_read):
    """Hold the parent's origin reads (only the parent's) until the returned release is called;
    ``start_read`` runs in a parent thread and is in flight when this returns."""
    parent = os.getpid()
    arrived, gate = threading.Event(), threading.Event()
    real = LocalStore.read

    def read(self, *args, **kwargs):
        if os.getpid() == parent:
            arrived.set()
            assert gate.wait(60), "test gate never opened"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LocalStore, "read", read)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(start_read()))
    reader.start()
    assert arrived.wait(60)

    def release() -> list[bytes]:
        gate.set()
        reader.join(60)
        return got

    return release


def _disk_holders(cache) -> set[int]:
    index = next(t for t in cache.tiers if t.name == "disk").index
    with index._env.begin(db=index._meta) as txn:
        return {int(k[len(b"holder:") :]) for k, _ in txn.cursor() if k.startswith(b"holder:")}


def _all(loader) -> list[bytes]:
    return [b for batch in loader for b in batch]


def test_dataloader_workers_over_datahub_fs(version, monkeypatch) -> None:
    DataLoader, _ = torch_data()
    config, data = version
    fs = DatahubFileSystem(config)
    try:
        assert fs.cat("ds@1/f1") == data[1]  # the parent's cache is open
        release = held_fetch(monkeypatch, lambda: fs.cat("ds@1/f0"))
        try:
            loader = DataLoader(fs_files(fs), batch_size=2, num_workers=2, multiprocessing_context="fork",
                                collate_fn=list, timeout=120)  # fmt: skip
            got = _all(loader)
        finally:
            assert release() == [data[0]]
        assert got == data
        assert os.getpid() in holders(fs)
    finally:
        fs.close()


def test_dataloader_workers_over_version_dataset(version, monkeypatch) -> None:
    from datahub.torch import CacheSource, VersionDataset

    DataLoader, _ = torch_data()
    config, data = version
    catalog = open_catalog(config.resolved_catalog_url)
    dataset = VersionDataset.from_catalog(catalog, "ds", 1, CacheSource(config), transform=_raw)
    catalog.close()
    try:
        assert dataset[1] == data[1]  # the parent's cache is open
        release = held_fetch(monkeypatch, lambda: dataset[0])
        try:
            loader = DataLoader(with_tiers(dataset), batch_size=2, num_workers=2, multiprocessing_context="fork",
                                collate_fn=list, timeout=120)  # fmt: skip
            got = _all(loader)
        finally:
            assert release() == [data[0]]
        assert [b for b, _ in got] == data
        # each worker has the disk tier every process shares (it was "already open in this
        # process": the worker's cache ran without it, re-reading the origin for every page)
        assert all("disk" in tiers for _, tiers in got), [tiers for _, tiers in got]
        assert os.getpid() in _disk_holders(dataset.source._open())
    finally:
        dataset.source.close()
