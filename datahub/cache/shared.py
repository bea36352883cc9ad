"""The shared tier: pages as objects in any ObjectStore (a Ceph RGW bucket in production,
a local directory by default), where several nodes meet.

Pages use the same self-checking format as the disk tier, stored under
``<root>/pages/<2 hex>/<digest>``; nothing else under the root is touched, so the
write-back workspace may keep its own objects beside them. Several nodes share the
budget, so no node can track usage exactly: ``maintain`` lists the pages at most every
``sweep_interval`` seconds and, above the high watermark, deletes the oldest (by mtime)
down to the low watermark. Every failure is a logged miss or a refused put.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from datahub.cache import pages as fmt
from datahub.cache.pages import PageKey
from datahub.cache.tier import Tier, TierUsage
from datahub.errors import ObjectNotFound
from datahub.storage.base import ObjectStore

log = logging.getLogger(__name__)

PREFIX = "pages/"


class SharedTier(Tier):
    persistent = True

    def __init__(
        self,
        store: ObjectStore,
        budget: int,
        *,
        high_watermark: float = 0.95,
        low_watermark: float = 0.80,
        sweep_interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.name = "shared"
        self.store = store
        self.budget = budget
        self.high, self.low = high_watermark, low_watermark
        self.sweep_interval = sweep_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._listed_bytes = 0
        self._listed_entries = 0
        self._added_bytes = 0  # put since the last sweep
        self._added_entries = 0
        self._swept_at: float | None = None

    @staticmethod
    def object_key(key: PageKey) -> str:
        return f"{PREFIX}{key.digest[:2]}/{key.digest}"

    def get(self, key: PageKey) -> bytes | None:
        try:
            blob = self.store.read(self.object_key(key))
        except ObjectNotFound:
            self.counters.misses += 1
            return None
        except Exception as exc:
            log.warning(
                "shared tier: reading page %s of %s failed (%s); treated as a miss", key.index, key.url, exc
            )
            self.counters.errors += 1
            self.counters.misses += 1
            return None
        data, problem = fmt.decode_page(key, blob)
        if data is None:
            log.warning(
                "shared tier: page %s of %s is corrupt (%s); removed, will refetch",
                key.index,
                key.url,
                problem,
            )
            self.counters.corrupt += 1
            self.counters.misses += 1
            self.delete(key)
            return None
        self.counters.hits += 1
        return data

    def put(self, key: PageKey, data: bytes, *, reason: str = "fill", hot: bool = False) -> bool:
        if len(data) > self.budget:
            self.counters.rejected += 1
            return False
        try:
            self.store.put(self.object_key(key), fmt.encode_page(key, data))
        except Exception as exc:
            log.warning("shared tier: storing page %s of %s failed (%s); not cached", key.index, key.url, exc)
            self.counters.errors += 1
            return False
        with self._lock:
            self._added_bytes += len(data)
            self._added_entries += 1
        self._count(reason)
        return True

    def delete(self, key: PageKey) -> None:
        try:
            self.store.delete(self.object_key(key))
        except Exception as exc:
            log.warning("shared tier: deleting page %s of %s failed (%s)", key.index, key.url, exc)

    def contains(self, key: PageKey) -> bool:
        try:
            self.store.stat(self.object_key(key))
            return True
        except Exception:
            return False

    def usage(self) -> TierUsage:
        with self._lock:
            return TierUsage(
                self._listed_bytes + self._added_bytes,
                self.budget,
                self._listed_entries + self._added_entries,
            )

    def maintain(self) -> None:
        now = self._clock()
        if self._swept_at is not None and now - self._swept_at < self.sweep_interval:
            return
        self._swept_at = now
        self.sweep()

    def sweep(self) -> int:
        """List the pages; above the high watermark delete the oldest down to the low one."""
        try:
            infos = list(self.store.list(PREFIX))
        except Exception as exc:
            log.warning("shared tier: listing %s failed (%s); eviction skipped", self.store.root_url, exc)
            self.counters.errors += 1
            return 0
        used = sum(i.size for i in infos)
        evicted = 0
        if used > self.high * self.budget:
            for info in sorted(infos, key=lambda i: i.mtime):
                if used <= self.low * self.budget:
                    break
                try:
                    self.store.delete(info.key)
                except Exception as exc:
                    log.warning("shared tier: evicting %s failed (%s)", info.key, exc)
                    continue
                used -= info.size
                evicted += 1
        with self._lock:
            self._listed_bytes, self._listed_entries = used, len(infos) - evicted
            self._added_bytes = self._added_entries = 0
        self.counters.evictions += evicted
        return evicted
