"""Sequential detection and readahead runs: the cache's second job, apart from the read path.

``ReaderPositions`` remembers where the reader of each object is, so a read can tell
whether it continues the previous one (sequential) or jumps (random). ``ReadaheadRuns``
fetches ahead of a sequential reader of an object below the stream threshold by whole runs
of pages, each ONE origin range read: origins that pay per request (S3; moto even reads the
whole object for every range) then see one GET per run instead of one per page. Large
objects are followed by streams instead (datahub.cache.stream).

Both serve datahub.cache.prefetcher, which decides between runs and streams.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

from datahub.cache.origin import Origin
from datahub.cache.pages import PageKey, ends, page_count, page_key, page_length
from datahub.cache.prefetch import BackgroundFetcher
from datahub.cache.singleflight import SingleFlight
from datahub.cache.tier import Tier
from datahub.storage.base import ObjectRef

MAX_STREAMS = 4096  # readers (objects) whose last read position is remembered for readahead
MAX_RUN_BYTES = 64 * 1024**2  # one coalesced readahead read fetches at most this much


class ReaderPositions:
    """Where the ``MAX_STREAMS`` most recent readers are, and whether they read sequentially.

    A reader is whatever key the prefetcher gives: (reader identity, object URL) when the
    caller names its reader (a FUSE file handle), else the object URL alone.
    """

    def __init__(self, limit: int = MAX_STREAMS) -> None:
        self.limit = limit
        # (last page, first page of its sequential streak or -1 when its last read was not)
        self._last: OrderedDict[Hashable, tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, reader: Hashable, first: int, last: int, window: int = 0) -> tuple[bool, bool, int]:
        """``reader`` reads pages ``first..last``: (seen before, sequential, pages of its
        sequential streak so far: 0 when not sequential).

        Sequential: it starts on the page the previous read ended on, or the next. Once a
        reader is sequential, a read up to ``window`` pages behind or past that still is:
        the kernel sends a sequential reader's reads (its own readahead) out of order, and
        the daemon's threads reach this point in any order, so a read of page p may come
        after pages p+2 and p+3 (seen through a real mount under load); its position then
        stays at the furthest page read. One page of slack behind was too little: one such
        late read ended the streak, and the file was then fetched page by page and, after
        a few such reads, by a whole-object fill as well (bytes fetched twice).
        A random reader never gets that slack, so its reads start no read-ahead.

        The same disorder at the start: a reader whose first read seen here is page 1 and
        whose next is page 0 opens the file sequentially (its streak starts at page 0).
        """
        with self._lock:
            previous = self._last.get(reader)
            start = -1
            if previous is None:
                sequential = False
            else:
                at, streak = previous
                opening = streak < 0 and first == 0 and at <= 1
                sequential = (
                    at <= first <= at + 1
                    or opening
                    or (streak >= 0 and at - max(1, window) <= first <= at + 1 + window)
                )
                if sequential:
                    last = max(last, at)
                    start = 0 if opening else streak if streak >= 0 else at
            self._last[reader] = (last, start)
            self._last.move_to_end(reader)
            while len(self._last) > self.limit:
                self._last.popitem(last=False)
        return previous is not None, sequential, (last - start + 1 if sequential else 0)


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

    def after_read(self, ref: ObjectRef, last: int, window: int | None = None) -> None:
        """A sequential reader of ``ref`` read up to page ``last``: fetch ahead if it is time.

        The window is the ``window`` pages after the last one read (the prefetcher grows
        it with the reader's streak; default and most ``readahead_pages``). A run is issued
        once the reader has used up half of what is buffered ahead, starting at the first
        page of the window that is neither in RAM nor being fetched, and covers up to
        window's pages (at most ``MAX_RUN_BYTES`` and the readahead queue's byte bound).
        """
        ps, ahead = self.page_size, self.readahead_pages
        if window is not None:
            ahead = max(1, min(ahead, window))
        total = page_count(ref.size, ps)
        start = None
        for i in range(last + 1, min(last + 1 + ahead, total)):
            key = page_key(ref, ps, i)
            if not (self._flight.in_flight(key) or (self.tiers and self.tiers[0].contains(key))):
                start = i
                break
        if start is None or start > last + 1 + ahead // 2:  # enough buffered: wait for a longer run
            return
        limit = min(MAX_RUN_BYTES, self._background.max_queued_bytes)  # a run fits the queue
        count = max(1, min(ahead, total - start, limit // ps))
        nbytes = min(ref.size, (start + count) * ps) - start * ps
        key = page_key(ref, ps, start)
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
        It runs on the background fetcher, whose workers schedule their origin requests as
        ``Priority.READAHEAD`` (they yield to demand reads).
        """
        ps = self.page_size
        keys: list[PageKey] = []
        claims: list[object] = []
        settled = 0
        try:
            for i in range(start, start + count):
                key = page_key(ref, ps, i)
                if self.tiers and self.tiers[0].contains(key):
                    claim = None
                elif any(t.contains(key) for t in self.tiers[1:]):
                    if not keys:  # below RAM: promote it (the per-page path; merges if in flight)
                        self._page(key, page_length(ref, ps, i), to_end=ends(ref, key), hot=True)
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
            data = self.origin.fetch(keys[0], lo, hi, to_end=hi == ref.size)
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
