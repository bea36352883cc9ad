"""The origin: the object store behind the cache, read in page-sized ranges under If-Match.

Every range read carries the etag the page is named by, so an object replaced behind a
snapshot raises ObjectChanged instead of returning bytes of another object (promise 1);
a short answer is treated the same way. Parallel reads are bounded by
``origin_concurrency``. Retries are not repeated here: the storage layer retries
transient failures (503, throttling, resets, timeouts) in its one retry policy
(``datahub.storage.retry``, ``s3.max_attempts``), and what it gives up on reaches the
reader as TransientStorageError.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass

from datahub.cache.pages import PageKey
from datahub.errors import ObjectChanged


@dataclass
class OriginCounters:
    fetches: int = 0
    bytes: int = 0
    errors: int = 0


class Origin:
    def __init__(self, stores, concurrency: int = 16) -> None:  # stores: datahub.storage.StoreRegistry
        self.stores = stores
        self._slots = threading.BoundedSemaphore(max(1, concurrency))
        self.counters = OriginCounters()

    def fetch(self, key: PageKey, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object version ``key`` names."""
        # A short first page is the whole object: read it without a Range header (cheaper
        # for S3 servers; the etag pins the size, and the length is checked below anyway).
        whole = start == 0 and end - start < key.page_size
        try:
            store, object_key = self.stores.for_url(key.url)
            with self._slots:
                data = store.read(object_key, start, None if whole else end, etag=key.etag)
        except Exception:
            self.counters.errors += 1
            raise
        if len(data) != end - start:
            self.counters.errors += 1
            raise ObjectChanged(
                f"object {key.url} returned {len(data)} bytes for range [{start}, {end}) of etag {key.etag}: "
                "it changed behind the snapshot; re-import the object or read a version that records it",
                url=key.url,
                etag=key.etag,
            )
        self.counters.fetches += 1
        self.counters.bytes += len(data)
        return data

    def stats(self) -> dict:
        return asdict(self.counters)
