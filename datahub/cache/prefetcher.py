"""The prefetcher: the one owner of read-ahead in datahub.

Every read of an object larger than one page tells the prefetcher where it was (object,
pages, and the reader's identity when the caller has one, e.g. a FUSE file handle); the
prefetcher alone decides what to fetch ahead of it. Nothing above the cache (the FUSE
layer, datahub.fs, datahub.torch) holds any read policy: they pass identities, offsets
and sizes. The decisions, as in mountpoint-s3's prefetcher:

- **sequential detection per reader**: a read that starts on the page the same reader
  last read, or the next one, is sequential; a first read at offset 0 is treated as
  sequential too (most readers from 0 read on). A sequential reader keeps that status
  through reads slightly out of order (within its read-ahead window: the kernel's own
  readahead arrives out of order); a random reader gets no such slack. Readers without an
  identity share one position per object.
- **large objects** (at least ``stream_min_bytes``): a sequential reader is followed by
  ONE streaming origin read (datahub.cache.stream) that runs ``readahead_bytes`` ahead;
  repeated random reads of such an object fill it whole in the background instead.
- **other objects** (and large ones when no stream is free): readahead runs, each one
  range read of the pages in the window after the reader (datahub.cache.readahead); the
  window starts at ``INITIAL_RUN_BYTES`` and grows with what the reader has read
  sequentially, up to ``readahead_bytes``.
- **random reads** read exactly their pages and start no read-ahead (apart from the
  whole-object fill after repeated random reads of a large object).

Every origin request the prefetcher makes is scheduled in ``Priority.READAHEAD``
(datahub.cache.priority), so it yields to demand and hinted reads. A page being fetched
ahead is claimed in the cache's singleflight first, so a reader asking for it waits for
that fetch and each byte is fetched once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

from datahub.cache.origin import Origin
from datahub.cache.pages import PageKey
from datahub.cache.prefetch import BackgroundFetcher
from datahub.cache.readahead import MAX_STREAMS, ReadaheadRuns, ReaderPositions
from datahub.cache.singleflight import SingleFlight
from datahub.cache.stream import Streams
from datahub.cache.tier import Tier
from datahub.storage.base import ObjectRef

MAX_TRACKED = 4096  # objects whose out-of-order read count is remembered
INITIAL_RUN_BYTES = 16 * 1024**2  # a sequential reader's first runs; then as much as it has read

# what ``before_read`` tells ``after_read`` to do once the reader has its pages; a positive
# plan is a sequential reader's readahead window in pages
NOTHING, RANDOM = 0, -1


class Prefetcher:
    """Sequential detection, readahead runs, streams and fills behind one interface.

    ``page(key, length, hot=True)`` is the cache's per-page read path; ``cached(key)``
    says whether a local tier holds a page and ``keep(key, data, hot, first=...)`` stores a
    streamed page (the cache's own). ``readahead_bytes`` is the one read-ahead window (0 =
    no read-ahead of sequential readers); ``queue_bytes`` bounds the bytes queued for
    readahead runs.
    """

    def __init__(
        self,
        tiers: Sequence[Tier],
        origin: Origin,
        flight: SingleFlight[bytes],
        page: Callable[..., bytes],
        *,
        page_size: int,
        readahead_bytes: int,
        queue_bytes: int,
        workers: int,
        cached: Callable[[PageKey], bool],
        keep: Callable[..., None],
        stream_min_bytes: int,
        fill_max_bytes: int,
        max_streams: int = 4,
        stream_idle_seconds: float = 10.0,
        fill_after_random_reads: int = 4,
        fill_concurrency: int = 1,
    ) -> None:
        self.page_size = page_size
        self.readahead_bytes = max(0, readahead_bytes)
        window = -(-self.readahead_bytes // page_size)  # pages, rounded up
        self.initial_pages = min(window, -(-INITIAL_RUN_BYTES // page_size))
        self._positions = ReaderPositions(MAX_STREAMS)
        self.background = BackgroundFetcher(
            workers=workers, max_queued_bytes=max(queue_bytes, page_size), scheduler=origin.scheduler
        )
        self.runs = ReadaheadRuns(
            tiers, origin, flight, self.background, page, page_size=page_size, readahead_pages=window
        )
        self.streams = Streams(
            origin,
            flight,
            page_size=page_size,
            cached=cached,
            keep=keep,
            min_bytes=stream_min_bytes,
            ahead_bytes=max(self.readahead_bytes, page_size),
            max_sequential=max_streams if window else 0,
            idle_seconds=stream_idle_seconds,
            max_fills=fill_concurrency,
        )
        self.fill_max_bytes = fill_max_bytes if stream_min_bytes else 0
        self.fill_after = max(1, fill_after_random_reads)
        self._random: OrderedDict[tuple[str, str], int] = OrderedDict()  # out-of-order reads per object
        self._random_lock = threading.Lock()

    def before_read(self, ref: ObjectRef, offset: int, first: int, last: int, reader: Hashable = None) -> int:
        """A reader is about to read pages ``first..last`` of ``ref``; returns what ``after_read``
        must do. Called before the pages are read, so that a stream started here claims the
        reader's next pages before the reader fetches them itself."""
        if ref.size <= self.page_size:
            return NOTHING  # one page: nothing to read ahead
        key = ref.url if reader is None else (reader, ref.url)
        seen, sequential, streak = self._positions.note(key, first, last, self.runs.readahead_pages)
        opening = not seen and offset == 0
        if self.streams.follow(ref, first, last, sequential or opening, reader=reader):
            return NOTHING  # a stream covers what comes next
        return self.run_window(streak) if sequential else RANDOM

    def run_window(self, streak: int) -> int:
        """The readahead window (pages) of a sequential reader ``streak`` pages into its
        streak: ``INITIAL_RUN_BYTES`` at first (its first page is not kept waiting for one
        long GET), then as many pages as it has read, up to ``readahead_bytes``: doubling
        run by run, as mountpoint-s3's prefetcher grows its requests."""
        return max(1, min(self.runs.readahead_pages, max(self.initial_pages, streak)))

    def after_read(self, ref: ObjectRef, last: int, plan: int) -> None:
        """The reader has read up to page ``last``: fetch ahead of it, or count a random read."""
        if plan > 0:
            if self.runs.readahead_pages:
                self.runs.after_read(ref, last, plan)
        elif plan == RANDOM:
            self._random_read(ref)

    def _random_read(self, ref: ObjectRef) -> None:
        """Every ``fill_after``-th out-of-order read of a large object (up to
        ``fill_max_bytes``) fills it whole: its reader is likely to come back for more."""
        if not self.streams.min_bytes <= ref.size <= self.fill_max_bytes:
            return
        oid = (ref.url, ref.etag)
        with self._random_lock:
            n = self._random.pop(oid, 0) + 1
            if n < self.fill_after:
                self._random[oid] = n
                while len(self._random) > MAX_TRACKED:
                    self._random.popitem(last=False)
                return
        self.streams.fill(ref)

    def note_read_now(self, ref: ObjectRef, first: int, last: int, reader: Hashable = None) -> bool:
        """A read of RAM-held pages answered without I/O (on an event loop): True if a stream
        follows this reader and has been told. Never blocks."""
        if not self.streams.note_read_now(ref, first, last, reader=reader):
            return False
        key = ref.url if reader is None else (reader, ref.url)
        self._positions.note(key, first, last, self.runs.readahead_pages)
        return True

    def stats(self) -> dict:
        return {"readahead": self.background.stats(), "streams": self.streams.stats()}

    def close(self) -> None:
        self.streams.close()
        self.background.close()
