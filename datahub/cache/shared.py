"""The shared tier: pages as objects in any ObjectStore (a Ceph RGW bucket in production,
a local directory by default), where several nodes meet.

Pages use the same self-checking format as the disk tier, stored under
``<root>/pages/<2 hex>/<digest>``; nothing else under the root is touched, so the
write-back workspace may keep its own objects beside them. Several nodes share the
budget, so no node can track usage exactly: ``maintain`` lists the pages at most every
``sweep_interval`` seconds and, above the high watermark, deletes the oldest (by mtime)
down to the low watermark. Every failure of the store is a counted, logged miss or a
refused put, through the tier template's one wrapper (datahub.cache.tier.tier_failure).

Puts are written behind: a reader that missed every tier gets its bytes as soon as the
origin answers, and the upload (a PUT to RGW, or a file write with two fsyncs in a local
directory) happens in a writer thread. Queued pages are served from the queue, which is
bounded in bytes (``write_behind_bytes``); when it is full a put waits for room, so a shared
store slower than the origin slows fills down instead of dropping pages. ``close`` uploads
what is queued. Nothing here needs durability: a page lost in a crash is a later miss.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from datahub.cache import pages as fmt
from datahub.cache.pages import PageKey
from datahub.cache.tier import Tier, TierUsage, tier_failure
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
        write_behind_bytes: int = 64 * 1024**2,
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
        self.write_behind_bytes = write_behind_bytes
        self._room = threading.Condition(self._lock)  # signalled when the queue shrinks or closes
        self._queue: deque[str] = deque()  # object keys in upload order
        self._queued: dict[str, tuple[PageKey, bytes]] = {}  # object key -> page, queued or uploading
        self._queued_bytes = 0
        self._uploading: str | None = None
        self._writer: threading.Thread | None = None
        self._closed = False

    @staticmethod
    def object_key(key: PageKey) -> str:
        return f"{PREFIX}{key.digest[:2]}/{key.digest}"

    def get(self, key: PageKey) -> bytes | None:
        with self._lock:
            queued = self._queued.get(self.object_key(key))
        if queued is not None:
            self.counters.add("hits")
            return queued[1]
        blob = None
        with tier_failure(self, "read", key):
            try:
                blob = self.store.read(self.object_key(key))
            except ObjectNotFound:
                pass  # a plain miss, not a failure
        if blob is None:
            self.counters.add("misses")
            return None
        data, problem = fmt.decode_page(key, blob)
        if data is None:
            log.warning(
                "shared tier: page %s of %s is corrupt (%s); removed, will refetch",
                key.index,
                key.url,
                problem,
            )
            self.counters.add_many(corrupt=1, misses=1)
            self.delete(key)
            return None
        self.counters.add("hits")
        return data

    def put(self, key: PageKey, data: bytes, *, reason: str = "fill", hot: bool = False) -> bool:
        """Queue the page for upload (waiting for room if the queue is full); False if refused."""
        if len(data) > self.budget or len(data) > self.write_behind_bytes:
            self.counters.add("rejected")
            return False
        okey = self.object_key(key)
        with self._room:
            while (
                not self._closed
                and self._queued_bytes
                and self._queued_bytes + len(data) > self.write_behind_bytes
            ):
                self._room.wait()
            if self._closed:
                self.counters.add("rejected")
                return False
            if okey in self._queued:
                return True
            self._queued[okey] = (key, data)
            self._queued_bytes += len(data)
            self._queue.append(okey)
            self._added_bytes += len(data)
            self._added_entries += 1
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_behind, name="datahub-shared-writer", daemon=True
                )
                self._writer.start()
            self._room.notify_all()
        self._count(reason)
        return True

    def _write_behind(self) -> None:
        while True:
            with self._room:
                while not self._queue and not self._closed:
                    self._room.wait()
                if not self._queue:
                    return
                okey = self._queue.popleft()
                key, data = self._queued[okey]
                self._uploading = okey
            try:
                with tier_failure(self, "store", key):
                    self.store.put(okey, fmt.encode_page(key, data))
            except Exception:  # the writer thread's top level: a bug here must not stop uploads
                log.exception("shared tier: uploading page %s of %s failed unexpectedly", key.index, key.url)
            with self._room:
                self._uploading = None
                self._queued.pop(okey, None)
                self._queued_bytes -= len(data)
                self._room.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued page is uploaded; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._room:
            while self._queued:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._room.wait(left)
        return True

    def close(self) -> None:
        self.flush(timeout=60.0)
        with self._room:
            self._closed = True
            self._room.notify_all()
        if self._writer is not None:
            self._writer.join(timeout=10)

    def delete(self, key: PageKey) -> None:
        okey = self.object_key(key)
        with self._room:
            while okey == self._uploading:  # let that upload land, then delete it
                self._room.wait()
            if okey in self._queued:
                _key, data = self._queued.pop(okey)
                self._queue.remove(okey)
                self._queued_bytes -= len(data)
                self._room.notify_all()
        self._delete_object(key)

    def _delete_object(self, key: PageKey) -> None:
        with tier_failure(self, "delete", key, counted=False):
            try:
                self.store.delete(self.object_key(key))
            except ObjectNotFound:
                pass  # gone already (another node evicted it)

    def contains(self, key: PageKey) -> bool:
        with self._lock:
            if self.object_key(key) in self._queued:
                return True
        with tier_failure(self, "check", key, counted=False):
            try:
                self.store.stat(self.object_key(key))
                return True
            except ObjectNotFound:
                return False
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
        self.flush(timeout=60.0)  # queued pages count once listed, not twice
        infos = None
        with tier_failure(self, "list", f"{self.store.root_url}{PREFIX}"):
            infos = list(self.store.list(PREFIX))
        if infos is None:
            return 0
        used = sum(i.size for i in infos)
        evicted = 0
        if used > self.high * self.budget:
            for info in sorted(infos, key=lambda i: i.mtime):
                if used <= self.low * self.budget:
                    break
                with tier_failure(self, "evict", info.key, counted=False) as failure:
                    self.store.delete(info.key)
                if failure.failed:
                    continue
                used -= info.size
                evicted += 1
        with self._lock:
            self._listed_bytes, self._listed_entries = used, len(infos) - evicted
            self._added_bytes = self._added_entries = 0
        self.counters.add("evictions", evicted)
        return evicted
