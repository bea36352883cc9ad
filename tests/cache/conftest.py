"""Fixtures for the cache tests: a source store full of random objects and a cache factory.

Sources are real stores (a local directory, or a bucket on moto / Ceph RGW); tests that
need to watch or hold origin reads wrap the real store in ``GatedStore``.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from datahub.cache import TieredCache, assemble_cache, open_cache
from datahub.config import Config, load_config
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectInfo, ObjectRef, ObjectStore

if TYPE_CHECKING:
    from datahub.fs import DatahubFileSystem


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    """Poll ``predicate`` until true; fail the test (never hang) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def hold_parent_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Hold this process's origin reads (``LocalStore.read``) until ``gate`` is set, telling
    ``arrived`` when one waits; a forked child's reads pass: a fetch in flight at a fork."""
    from datahub.storage.local import LocalStore

    parent = os.getpid()
    arrived, gate = threading.Event(), threading.Event()
    real = LocalStore.read

    def read(self, *args, **kwargs):
        if os.getpid() == parent:  # only the parent's fetch is held
            arrived.set()
            assert gate.wait(60), "test gate never opened"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(LocalStore, "read", read)
    return arrived, gate


def with_cache(config: Config, **cache: object) -> Config:
    return config.model_copy(update={"cache": config.cache.model_copy(update=cache)})


def put_objects(
    store: ObjectStore, sizes: list[int], seed: int = 0, prefix: str = "obj"
) -> list[tuple[ObjectRef, bytes]]:
    rng = random.Random(seed)
    out = []
    for i, size in enumerate(sizes):
        data = rng.randbytes(size)
        key = f"{prefix}/{i:05d}.bin"
        store.put(key, data)
        out.append((store.ref(key), data))
    return out


@contextlib.contextmanager
def local_origin_cache(
    tmp_path: Path, sizes: list[int], seed: int, page_size: int = 64 * 1024
) -> Iterator[tuple[Config, StoreRegistry, list]]:
    """A RAM + disk cache of ``page_size`` pages (no read-ahead) over a local-directory origin
    holding objects of ``sizes``: (config, stores, [(ref, bytes)]), the stores closed after."""
    config = load_config(env={}, overrides={"home": str(tmp_path / "var")})
    config = with_cache(
        config, page_size=page_size, ram_bytes=8 << 20, disk_bytes=64 << 20, readahead_bytes=0
    )
    with StoreRegistry(config) as stores:
        root = tmp_path / "origin"
        root.mkdir()
        yield config, stores, put_objects(stores.store(root.as_uri()), sizes, seed=seed)


def dataset_fs(
    config: Config, source: ObjectStore, files: dict[str, int], message: str
) -> Iterator[DatahubFileSystem]:
    """A ``datahub://`` filesystem over dataset ``ds`` at v1 holding ``files`` (key: size) as
    random objects of ``source``; ``.data`` maps each key to its bytes. Closed after use."""
    from datahub.catalog import Put, Record, open_catalog
    from datahub.fs import DatahubFileSystem

    objects = put_objects(source, list(files.values()))
    catalog = open_catalog(config.resolved_catalog_url)
    try:
        catalog.create_dataset("ds")
        puts = [
            Put(Record(k, ref.url, ref.etag, ref.size)) for k, (ref, _) in zip(files, objects, strict=True)
        ]
        catalog.commit("ds", puts, message=message)
    finally:
        catalog.close()
    filesystem = DatahubFileSystem(with_cache(config, page_size=1024))
    filesystem.data = {k: data for k, (_, data) in zip(files, objects, strict=True)}
    yield filesystem
    filesystem.close()


@pytest.fixture
def stores(config: Config) -> Iterator[StoreRegistry]:
    registry = StoreRegistry(config)
    yield registry
    registry.close()


@pytest.fixture
def source(tmp_path: Path, stores: StoreRegistry) -> ObjectStore:
    """A local directory store holding the test's objects (the origin)."""
    root = tmp_path / "origin"
    root.mkdir()
    return stores.store(root.as_uri())


@pytest.fixture
def make_cache(config: Config, stores: StoreRegistry) -> Iterator[Callable[..., TieredCache]]:
    """``make_cache(**cache_fields)`` opens a cache on the test's home; all closed at teardown."""
    opened: list[TieredCache] = []

    def factory(**cache: object) -> TieredCache:
        defaults = {"page_size": 1024, "ram_bytes": 64 * 1024, "disk_bytes": 1024**2, "maintain": None}
        defaults.update(cache)
        defaults.pop("maintain")
        cache_obj = open_cache(with_cache(config, **defaults), stores)
        opened.append(cache_obj)
        return cache_obj

    yield factory
    for c in opened:
        c.close()


class GatedStore(ObjectStore):
    """A real store whose reads can be held at a gate and are counted (concurrency too)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.root_url = inner.root_url
        self.gate = threading.Event()
        self.gate.set()
        self.reads = 0
        self.active = 0
        self.max_active = 0
        self.arrived = threading.Semaphore(0)
        self._lock = threading.Lock()

    def read(self, key: str, start: int = 0, end: int | None = None, etag: str | None = None) -> bytes:
        with self._lock:
            self.reads += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self.arrived.release()
        try:
            assert self.gate.wait(30), "test gate never opened"
            return self.inner.read(key, start, end, etag)
        finally:
            with self._lock:
                self.active -= 1

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


class OneStoreRegistry:
    """Routes every object URL to one store (how tests put a GatedStore behind a cache)."""

    def __init__(self, store: GatedStore, root_path: str) -> None:
        self.store_ = store
        self.root_path = root_path.rstrip("/") + "/"
        # the one store is the objects store too (its blobs verify themselves: selfverify.own_blob)
        self.config = SimpleNamespace(resolved_objects_url=Path(root_path).as_uri())

    def for_url(self, url: str) -> tuple[ObjectStore, str]:
        path = url.removeprefix("file://")
        return self.store_, os.path.relpath(path, self.root_path)

    def store(self, root_url: str) -> ObjectStore:
        return self.store_

    def close(self) -> None:
        pass


def gated_cache(
    tmp_path: Path, source: ObjectStore, concurrency: int = 16, **options: object
) -> tuple[TieredCache, GatedStore]:
    """A RAM + disk cache (1 KiB pages) whose origin is ``source`` behind a GatedStore."""
    from datahub.cache import DiskTier, RamTier, make_policy
    from datahub.cache.origin import Origin

    gated = GatedStore(source)
    registry = OneStoreRegistry(gated, str(source.root))
    tiers = [
        RamTier(1 << 20, make_policy("lru", 1 << 20)),
        DiskTier(tmp_path / "disk", 1 << 20, make_policy("lru", 1 << 20)),
    ]
    options = {"page_size": 1024, "readahead_bytes": 0, **options}
    return assemble_cache(tiers, Origin(registry, concurrency), **options), gated


#: a read: (record, offset, size), as ``TieredCache.read`` takes it
Read = tuple[ObjectRef, int, int]


def merged_reads(tmp_path: Path, source: ObjectStore, leader: Read, follower: Read) -> tuple[object, object]:
    """``leader``'s read fetches its page, held at the origin's gate, while ``follower``'s
    read of the same page merges into that fetch (single flight); then the gate opens. What
    each read returned, or the exception it raised."""
    from concurrent.futures import ThreadPoolExecutor

    def outcome(future) -> object:
        try:
            return future.result(30)
        except Exception as exc:  # the test checks which
            return exc

    cache, gated = gated_cache(tmp_path, source)
    with cache, ThreadPoolExecutor(2) as pool:
        gated.gate.clear()
        first = pool.submit(cache.read, *leader)
        assert gated.arrived.acquire(timeout=30)  # the leader's fetch holds the origin
        merged = cache._flight.merged
        second = pool.submit(cache.read, *follower)
        wait_for(lambda: cache._flight.merged > merged, what="the follower's read to wait for that fetch")
        gated.gate.set()
        return outcome(first), outcome(second)
