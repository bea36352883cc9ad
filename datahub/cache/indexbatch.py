"""Deferred, batched inserts into the disk tier's LMDB index.

Why: every LMDB write transaction takes the environment's writer lock (shared by every
process on the cache directory) and writes its dirty pages and a meta page at commit.
One transaction per cold page is a fixed cost paid 16 ways at once by the prefetch
workers; one transaction per ``batch`` pages pays it once.

What it costs: a stored page file can exist for a while (at most ``batch`` pages, or
until the next ``flush``: the cache's maintenance round, or ``close``) without an index
entry. That is safe because the index is a cache of the truth held by the page files:
- this process knows the page (the tier's own bookkeeping) and serves it;
- another process sharing the directory adopts the file when it hits it (as it does
  for any page it did not index itself), and sees the index catch up a little later;
- a crash leaves this process registered as a holder of the index, so the next start
  rebuilds the index from the page headers (datahub.cache.index.PageIndex.attach), and
  the unindexed files are counted again;
- a clean close flushes first.

A removal of a page not yet indexed just drops it from the batch; a removal racing the
flush of its batch is repeated after that flush. Only one flush runs at a time, so a
page removed and stored again can never be re-added by an older batch after a newer one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from datahub.cache.index import PageIndex
from datahub.cache.pages import PageKey
from datahub.cache.tier import TIER_ERRORS

log = logging.getLogger(__name__)

INDEX_BATCH = 64  # pages per index transaction


class IndexBatcher:
    """Adds to ``index`` in batches; ``on_failed(entries)`` handles a batch LMDB refused."""

    def __init__(
        self,
        index: PageIndex,
        on_failed: Callable[[list[tuple[PageKey, int]]], None],
        batch: int = INDEX_BATCH,
    ) -> None:
        self.index = index
        self.batch = max(1, batch)
        self._on_failed = on_failed
        self._cond = threading.Condition()
        self._pending: dict[str, tuple[PageKey, int]] = {}  # digest -> page stored, not yet indexed
        self._flushing: dict[str, tuple[PageKey, int]] = {}  # the batch being written now
        self._removed: set[str] = set()  # removed while its batch was being written: remove again after

    def add(self, key: PageKey, size: int) -> None:
        """Record a stored page; writes a batch when enough are pending and no flush runs."""
        with self._cond:
            self._pending[key.digest] = (key, size)
            if len(self._pending) < self.batch or self._flushing:
                return
        self.flush(wait=False)

    def remove(self, digest: str) -> None:
        """Forget a page (evicted, corrupt, lost): in the batch, or in the index."""
        with self._cond:
            if self._pending.pop(digest, None) is not None:
                return  # never reached the index
            if digest in self._flushing:
                self._removed.add(digest)  # its add may commit after the removal below
        self.index.remove(digest)

    def pending(self) -> int:
        with self._cond:
            return len(self._pending) + len(self._flushing)

    def flush(self, *, wait: bool = True) -> None:
        """Write every pending page to the index. ``wait``: also wait for a flush in progress
        (close, tests); otherwise a running flush is left to pick up what is pending."""
        while True:
            with self._cond:
                while self._flushing and wait:
                    self._cond.wait()
                if self._flushing or not self._pending:
                    return
                batch, self._pending = self._pending, {}
                self._flushing = batch
            ok = False
            try:
                self.index.add_many(batch.values())
                ok = True
            except TIER_ERRORS as exc:  # a bug propagates (after the bookkeeping below)
                log.warning(
                    "disk cache: recording %d pages in the index failed (%s); removing their files",
                    len(batch),
                    exc,
                )
            finally:
                with self._cond:
                    self._flushing = {}
                    again = self._removed & batch.keys()
                    self._removed -= again
                    # a page removed and stored again meanwhile is a new file, pending again
                    failed = (
                        []
                        if ok
                        else [e for d, e in batch.items() if d not in again and d not in self._pending]
                    )
                    more = len(self._pending) >= self.batch
                    self._cond.notify_all()
            for digest in again:
                self.index.remove(digest)
            if failed:
                self._on_failed(failed)
            if not (wait or more):
                return
