"""Where a read-only mount gets its bytes: the tiered cache, or the object store directly.

Both speak the cache's shape, ``read(ref, offset, size) -> bytes`` (verified bytes of
the immutable object ``ref``), so the file system never knows which one it has. The
cache is the normal path (RAM/SSD tiers, readahead, prefetch); :class:`StoreSource`
is the fallback when no cache is configured and the baseline the benchmark compares to.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Protocol

from datahub.config import Config
from datahub.storage.base import ObjectRef

log = logging.getLogger(__name__)


class ByteSource(Protocol):
    def read(self, ref: ObjectRef, offset: int = 0, size: int | None = None) -> bytes | memoryview:
        """Bytes ``[offset, offset+size)`` of ``ref``; ObjectChanged/ObjectNotFound if it moved."""
        ...

    def read_cached(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None
    ) -> bytes | memoryview | None:
        """The bytes if they can be had at once without I/O (in RAM), else None."""
        ...

    def hint(self, refs: Sequence[ObjectRef]) -> None:
        """Upcoming read order (best effort)."""
        ...

    def prefetch(self, refs: Iterable[ObjectRef], *, cancel: threading.Event | None = None) -> object:
        """Warm these objects (blocking; run in a worker thread; stops when ``cancel`` is set)."""
        ...

    def close(self) -> None: ...


class StoreSource:
    """Range reads straight from the object store, each conditional on the recorded etag."""

    def __init__(self, stores) -> None:  # stores: datahub.storage.StoreRegistry
        self._stores = stores

    def read(self, ref: ObjectRef, offset: int = 0, size: int | None = None) -> bytes:
        store, key = self._stores.for_url(ref.url)
        end = ref.size if size is None else min(ref.size, offset + size)
        if offset >= end:
            return b""
        return store.read(key, offset, end, etag=ref.etag)

    def read_cached(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None
    ) -> bytes | memoryview | None:
        return None  # nothing is kept

    def hint(self, refs: Sequence[ObjectRef]) -> None:
        pass

    def prefetch(self, refs: Iterable[ObjectRef], *, cancel: threading.Event | None = None) -> object:
        return None  # nowhere to keep the bytes

    def close(self) -> None:
        pass


class CacheSource:
    """The tiered cache (``datahub.cache.open_cache``): verified pages, readahead, prefetch."""

    def __init__(self, cache) -> None:  # cache: datahub.cache.TieredCache
        self._cache = cache

    def read(self, ref: ObjectRef, offset: int = 0, size: int | None = None) -> bytes | memoryview:
        if size is not None:
            size = max(0, min(size, ref.size - offset))
        return self._cache.read(ref, offset, size, view=True)  # a view into the page: no copy

    def read_cached(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None
    ) -> bytes | memoryview | None:
        return self._cache.read_cached(ref, offset, size)

    def hint(self, refs: Sequence[ObjectRef]) -> None:
        self._cache.hint(refs)

    def prefetch(self, refs: Iterable[ObjectRef], *, cancel: threading.Event | None = None) -> object:
        return self._cache.prefetch(refs, cancel=cancel)

    def close(self) -> None:
        self._cache.close()


def open_source(config: Config, stores, *, use_cache: bool = True) -> ByteSource:
    """The cache when it is available (and wanted), else direct store reads."""
    if use_cache:
        try:
            from datahub.cache import open_cache
        except ImportError:
            log.warning("datahub.cache.open_cache is not available; reading from the object store directly")
        else:
            return CacheSource(open_cache(config, stores))
    return StoreSource(stores)
