"""Sequential detection and readahead runs: the cache's second job, apart from the read path.

``ReaderPositions`` remembers where the reader of each object is, so a read can tell
whether it continues the previous one (sequential) or jumps (random). ``ReadaheadRuns``
fetches ahead of a sequential reader of an object below the stream threshold by whole runs
of pages, each ONE origin range read: origins that pay per request (S3; moto even reads the
whole object for every range) then see one GET per run instead of one per page. Large
objects are followed by streams instead (datahub.cache.stream).

Split out of datahub.cache.tiered, which composes both into ``TieredCache.read``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from datahub.cache.origin import Origin
from datahub.cache.pages import PageKey, page_count, page_length
from datahub.cache.prefetch import BackgroundFetcher
from datahub.cache.singleflight import SingleFlight
from datahub.cache.tier import Tier
from datahub.storage.base import ObjectRef

MAX_STREAMS = 4096  # objects whose last read position is remembered for readahead
MAX_RUN_BYTES = 64 * 1024**2  # one coalesced readahead read fetches at most this much


class ReaderPositions:
    """The last page read of the ``MAX_STREAMS`` most recently read objects."""

    def __init__(self, limit: int = MAX_STREAMS) -> None:
        self.limit = limit
        self._last: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, ref: ObjectRef, first: int, last: int) -> int | None:
        """Remember where the reader of ``ref`` is; returns the last page of its previous read.

        A sequential reader of a large object (or one starting at offset 0) is fed by a
        stream, started before its pages are read so that it waits for the stream instead
        of fetching them itself; other sequential readers get readahead runs after their
        read; random readers of a large object may start a whole-object fill
        (datahub.cache.stream).
        """
        with self._lock:
            previous = self._last.get(ref.url)
            self._last[ref.url] = last
            self._last.move_to_end(ref.url)
            while len(self._last) > self.limit:
                self._last.popitem(last=False)
        return previous


class ReadaheadRuns:
    """Readahead of a sequential reader by whole runs of pages on the background fetcher.

    ``page(key, length, hot=True)`` is the cache's per-page read path, used to promote a
    page a lower tier holds; ``tiers``, ``flight`` and ``origin`` are the cache's own.
    """

    def __init__(
        self,
        tiers: Sequence[Tier],
        origin: Origin,
        flight: SingleFlight[bytes],
        background: BackgroundFetcher,
        page: Callable[..., bytes],
        *,
        page_size: int,
        readahead_pages: int,
    ) -> None:
        self.tiers = tiers
        self.origin = origin
        self._flight = flight
        self._background = background
        self._page = page
        self.page_size = page_size
        self.readahead_pages = readahead_pages

    def after_read(self, ref: ObjectRef, last: int) -> None:
        """A sequential reader of ``ref`` read up to page ``last``: fetch ahead if it is time.

        The window is the ``readahead_pages`` pages after the last one read. A run is issued
        once the reader has used up half of what is buffered ahead, starting at the first
        page of the window that is neither in RAM nor being fetched, and covers up to
        ``readahead_pages`` pages (at most ``MAX_RUN_BYTES`` and the readahead queue's byte
        bound).
        """
        ps, ahead = self.page_size, self.readahead_pages
        total = page_count(ref.size, ps)
        start = None
        for i in range(last + 1, min(last + 1 + ahead, total)):
            key = PageKey(ref.url, ref.etag, ps, i)
            if not (self._flight.in_flight(key) or (self.tiers and self.tiers[0].contains(key))):
                start = i
                break
        if start is None or start > last + 1 + ahead // 2:  # enough buffered: wait for a longer run
            return
        limit = min(MAX_RUN_BYTES, self._background.max_queued_bytes)  # a run fits the queue
        count = max(1, min(ahead, total - start, limit // ps))
        nbytes = min(ref.size, (start + count) * ps) - start * ps
        key = PageKey(ref.url, ref.etag, ps, start)
        self._background.submit(key, nbytes, lambda: self.fetch_run(ref, start, count))

    def fetch_run(self, ref: ObjectRef, start: int, count: int) -> None:
        """Fetch pages ``start..start+count-1`` of ``ref`` with one origin range read.

        Each page is claimed in the singleflight first, so a reader asking for any of them
        meanwhile waits for this one read instead of issuing its own. The run stops at the
        first page some tier holds or another caller is already fetching after it has claimed
        one; leading pages that are held or being fetched (a reader that outran the queued
        run) are skipped, not the end of the run. The read carries
        the etag (If-Match) and its length is checked, so a changed object fails the whole
        run with ObjectChanged and every waiter gets that error; nothing is stored.
        """
        ps = self.page_size
        keys: list[PageKey] = []
        claims: list[object] = []
        settled = 0
        try:
            for i in range(start, start + count):
                key = PageKey(ref.url, ref.etag, ps, i)
                if self.tiers and self.tiers[0].contains(key):
                    claim = None
                elif any(t.contains(key) for t in self.tiers[1:]):
                    if not keys:  # below RAM: promote it (the per-page path; merges if in flight)
                        self._page(key, page_length(ref, ps, i), hot=True)
                    claim = None
                else:
                    claim = self._flight.claim(key)
                if claim is None:
                    if keys:
                        break
                    continue  # the reader (or a tier) got there first: the run starts after it
                keys.append(key)
                claims.append(claim)
            if not keys:
                return
            start = keys[0].index
            lo, hi = start * ps, min(ref.size, (start + len(keys)) * ps)
            data = self.origin.fetch(keys[0], lo, hi)
            view = memoryview(data)
            for j, key in enumerate(keys):
                page = data if len(keys) == 1 else bytes(view[j * ps : min(len(data), (j + 1) * ps)])
                for tier in self.tiers:
                    tier.put(key, page, reason="fill", hot=True)
                self._flight.settle(key, claims[j], value=page)
                settled = j + 1
        except BaseException as exc:
            for j in range(settled, len(keys)):
                self._flight.settle(keys[j], claims[j], error=exc)
            raise
