"""Write-behind of streamed pages to the slower tiers, on a thread of its own.

Split from datahub.cache.stream: a stream receives pages and hands each to the fastest
tier and its waiters at once; writing the same page to the disk tier is a separate job,
done here while the next page arrives.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from datahub.cache.pages import PageKey

log = logging.getLogger(__name__)


class LowerTierWriter:
    """Writes streamed pages to the slower tiers (disk) on its own thread.

    A stream would otherwise alternate receiving and writing; with the writes here the two
    overlap (socket reads, checksums and file writes release the GIL). The queue is bounded
    in bytes: a stream that outruns the disk waits in ``submit``. On close, pages still
    queued are dropped: they are in the fastest tier already, and the cache is only a cache.
    """

    def __init__(self, keep: Callable[..., None], max_bytes: int) -> None:
        self._keep = keep
        self.max_bytes = max_bytes
        self._cond = threading.Condition()
        self._queue: deque[tuple[PageKey, bytes, bool]] = deque()
        self._queued_bytes = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="datahub-stream-writer", daemon=True)
        self._thread.start()

    def submit(self, key: PageKey, data: bytes, hot: bool) -> None:
        with self._cond:
            while self._queued_bytes and self._queued_bytes + len(data) > self.max_bytes and not self._closed:
                self._cond.wait()
            if self._closed:
                return
            self._queue.append((key, data, hot))
            self._queued_bytes += len(data)
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                key, data, hot = self._queue.popleft()  # its bytes count until written
            try:
                self._keep(key, data, hot, first=False)
            except Exception:  # the writer thread's top level: tiers turn failures into misses,
                # so only a bug gets here; it must not stop the writer (logged with its traceback)
                log.exception("writing streamed page %d of %s failed", key.index, key.url)
            with self._cond:
                if not self._closed:  # close() zeroed the count already
                    self._queued_bytes -= len(data)
                self._cond.notify_all()

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every queued page is written (tests; True if it was)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queued_bytes:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def queued_bytes(self) -> int:
        with self._cond:
            return self._queued_bytes

    def close(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._queued_bytes = 0
            self._cond.notify_all()
        self._thread.join(timeout)
