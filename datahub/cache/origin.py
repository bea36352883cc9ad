"""The origin: the object store behind the cache, read in page-sized ranges under If-Match.

Every range read carries the etag the page is named by, so an object replaced behind a
snapshot raises ObjectChanged instead of returning bytes of another object (promise 1);
a short answer is treated the same way. Parallel reads are bounded by
``origin_concurrency``. The storage layer already retries inside one request; what still
comes back as TransientStorageError (a 503 burst, a timeout) is retried here a few more
times with capped exponential backoff, because a training read should ride out a short
outage rather than fail.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from datahub.cache.pages import PageKey
from datahub.errors import ObjectChanged, TransientStorageError

log = logging.getLogger(__name__)


@dataclass
class OriginCounters:
    fetches: int = 0
    bytes: int = 0
    retries: int = 0
    errors: int = 0


class Origin:
    def __init__(
        self,
        stores,  # datahub.storage.StoreRegistry
        concurrency: int = 16,
        *,
        attempts: int = 4,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.stores = stores
        self._slots = threading.BoundedSemaphore(max(1, concurrency))
        self.attempts, self.backoff, self.max_backoff = max(1, attempts), backoff, max_backoff
        self._sleep = sleep
        self.counters = OriginCounters()

    def fetch(self, key: PageKey, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object version ``key`` names."""
        store, object_key = self.stores.for_url(key.url)
        delay = self.backoff
        for attempt in range(1, self.attempts + 1):
            try:
                with self._slots:
                    data = store.read(object_key, start, end, etag=key.etag)
                break
            except TransientStorageError as exc:
                if attempt == self.attempts:
                    self.counters.errors += 1
                    raise
                self.counters.retries += 1
                log.info(
                    "origin: %s (attempt %d of %d); retrying in %.2fs", exc, attempt, self.attempts, delay
                )
                self._sleep(delay)
                delay = min(delay * 2, self.max_backoff)
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
