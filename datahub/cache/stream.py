"""Streams: large objects fetched by ONE origin read, cut into pages as the bytes arrive.

Readahead runs cost one request per run; for an object of hundreds of MiB that is still
dozens of requests, and S3 servers charge per request (moto even reads the whole object
for each). A ``PageStream`` opens one streaming read (``Origin.stream``) from a page to
the end of the object and cuts it into pages as they arrive; each page is stored in the
tiers and handed to the readers waiting for it through the cache's singleflight, so a
page being streamed is never fetched a second time.

Two kinds:

- **sequential**: follows one reader. It claims the pages up to ``ahead_pages`` past the
  reader (a reader of such a page waits for the stream instead of fetching it), and never
  delivers beyond that window: the bytes in flight are bounded by ``ahead_pages`` pages
  plus one chunk. It stops when the reader jumps out of the window, has not read for
  ``idle_seconds``, or the cache closes.
- **fill**: after repeated random reads of a large object, the whole object streams into
  the cache in the background. It claims only the page it is assembling, so a random
  reader of any other page fetches its page at once, as before, instead of waiting behind
  the fill.

A sequential stream never downloads a page it has not claimed: when the next page is held
by a tier or being fetched by someone else (a reader, a warm-up, a readahead run), the
request ends there and a new one resumes after it, so every byte comes from the origin
once (at most the chunk in transit is wasted). A fill does so only before
``FILL_SKIP_PAGES`` such pages in a row; it receives a random reader's scattered pages
again rather than paying a request for each. Stream threads schedule their requests as
``Priority.READAHEAD`` (datahub.cache.priority): they yield to demand reads.

A stream claims pages before the origin scheduler admits its request (the reader's window
is claimed on the reader's thread, so its next read never races the stream's thread). Its
claims therefore carry the stream's scheduler ``Ticket``: a reader who waits for a claimed
page raises the stream's queued request (or, if none queues, its next one) to the reader's
class, so a demand read is served in demand order, never behind the stream's place in the
read-ahead queue (priority inheritance, datahub.cache.scheduler).

Stopping releases the claimed pages with ``Abandoned``: their waiters fetch them
themselves. ObjectChanged / ObjectNotFound from the origin reach the waiters as they are;
other failures abandon (the reader's own fetch then retries and reports). Nothing is
stored from a stream that returned a wrong length: the length is checked per page against
the object's recorded size, and in total by ``Origin.stream``.

Over a store whose ``read_chunks`` is the contract's one-piece default, a stream asks for
ranges of at most ``SEGMENT_BYTES`` (bounded memory, and still few requests). Writing
streamed pages to the slower tiers is datahub.cache.writebehind's job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

from datahub.cache.counters import Counters
from datahub.cache.origin import Origin
from datahub.cache.pages import PageKey, page_count, page_key, page_length
from datahub.cache.priority import Priority, origin_priority
from datahub.cache.scheduler import Ticket
from datahub.cache.singleflight import Abandoned, SingleFlight
from datahub.cache.writebehind import LowerTierWriter
from datahub.errors import ObjectChanged, ObjectNotFound
from datahub.storage.base import ObjectRef

log = logging.getLogger(__name__)

SEGMENT_BYTES = 64 * 1024**2  # one request's range when the store cannot stream
FILL_SKIP_PAGES = 4  # a fill ends its request only before this many pages held or in flight
WRITE_BEHIND_WINDOWS = 4  # the disk writer's queue holds this many stream windows


class StreamCounters(Counters):
    FIELDS = (
        "sequential",  # sequential streams started
        "fills",  # whole-object fills started
        "requests",  # origin requests made by streams
        "bytes",  # bytes received by streams
        "pages",  # pages stored by streams
        "skipped",  # pages received but already held by a tier or another fetch
        "stopped",  # streams stopped early (reader jumped, idle, close)
        "failed",  # streams ended by an origin error
    )


class PageStream:
    """One object's pages from one streaming read; see the module docstring."""

    def __init__(
        self,
        owner: Streams,
        ref: ObjectRef,
        first: int,
        *,
        fill: bool,
        reader_page: int = -1,
        reader: Hashable = None,
    ) -> None:
        self.owner = owner
        self.ref = ref
        self.fill = fill
        self.reader = reader  # whose reads it follows (sequential; None = any reader of the object)
        self.page_size = owner.page_size
        self.total = page_count(ref.size, self.page_size)
        self.first = first
        self._lock = threading.Condition()
        self._claims: dict[int, object] = {}
        self._claiming: set[int] = set()  # pages another thread is deciding on right now
        self._claim_next = first
        self._reader = reader_page  # last page the reader read (sequential)
        self._last_read = owner.clock()
        self._stopped = False
        # its place in the origin queue, which readers waiting for its claims raise
        self.ticket = Ticket(owner.origin.scheduler, Priority.READAHEAD)
        self.thread = threading.Thread(
            target=self.run, name=f"datahub-{'fill' if fill else 'stream'}", daemon=True
        )

    @property
    def kind(self) -> str:
        return "fill" if self.fill else "sequential"

    def key(self, index: int) -> PageKey:
        return page_key(self.ref, self.page_size, index)

    # --- the reader's side -----------------------------------------------------------------------
    def advance(self, first: int, last: int) -> bool:
        """The reader read pages ``first..last``; False (and the stream stops) if it jumped away."""
        ahead = self.owner.ahead_pages
        with self._lock:
            if self._stopped:
                return False
            if not self._reader - ahead <= first <= self._reader + ahead + 1:
                jumped = True
            else:
                jumped = False
                self._reader = max(self._reader, last)
                self._last_read = self.owner.clock()
                self._lock.notify_all()
        if jumped:
            self.stop()
            return False
        self._claim_upto(self._reader + 1 + ahead)
        return True

    def note_reader(self, first: int, last: int) -> bool:
        """``advance`` for a read served from RAM on an event loop: in memory only (no claims,
        no stop); False if the read is not where this stream expects its reader."""
        ahead = self.owner.ahead_pages
        with self._lock:
            if self._stopped or not self._reader - ahead <= first <= self._reader + ahead + 1:
                return False
            self._reader = max(self._reader, last)
            self._last_read = self.owner.clock()
            self._lock.notify_all()
        return True

    def stop(self) -> None:
        """Stop early: waiters of claimed pages are released to fetch them themselves."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            claims, self._claims = self._claims, {}
            self._lock.notify_all()
        self.owner.count(stopped=1)
        for index, claim in claims.items():
            self.owner.flight.settle(self.key(index), claim, error=Abandoned())

    # --- claims ----------------------------------------------------------------------------------
    def _claim_upto(self, limit: int) -> None:
        """Claim the pages before ``limit`` not yet considered, unless held or being fetched.

        Returns only once every page before ``limit`` is decided, including those another
        thread is claiming right now: a reader reads next, and a page whose claim is not yet
        registered would be fetched by that reader a second time, and cut the stream's request.
        """
        limit = min(limit, self.total)
        while True:
            with self._lock:
                if self._stopped:
                    return
                if self._claim_next >= limit:
                    while not self._stopped and any(i < limit for i in self._claiming):
                        self._lock.wait()
                    return
                index = self._claim_next
                self._claim_next += 1
                self._claiming.add(index)
            key = self.key(index)
            claim = None if self.owner.cached(key) else self.owner.flight.claim(key, self.ticket)
            with self._lock:
                self._claiming.discard(index)
                self._lock.notify_all()
                if claim is None:
                    continue
                if not self._stopped:
                    self._claims[index] = claim
                    continue
            self.owner.flight.settle(key, claim, error=Abandoned())

    def _claim_limit(self, page: int) -> int:
        if self.fill:
            return page + 1
        with self._lock:
            return max(page + 1, self._reader + 1 + self.owner.ahead_pages)

    # --- the stream's thread ---------------------------------------------------------------------
    def run(self) -> None:
        # speculative: demand reads go first, unless a reader waits for its pages (the ticket)
        with origin_priority(Priority.READAHEAD), self.ticket.use():
            self._run()

    def _run(self) -> None:
        error: BaseException | None = None
        try:
            page = self.first
            whole = self.owner.origin.streams_natively(self.ref.url)
            segment_pages = max(1, SEGMENT_BYTES // self.page_size)
            while page < self.total:
                page = self._next_own(page)
                if page >= self.total:
                    break
                end = self.total if whole else min(self.total, page + segment_pages)
                page = self._stream_range(page, end)
        except (ObjectChanged, ObjectNotFound) as exc:
            error = exc
            self.owner.count(failed=1)
            log.info("stream of %s stopped: %s", self.ref.url, exc)
        except Exception as exc:  # the stream thread's top level: its readers must be released
            error = Abandoned()
            self.owner.count(failed=1)
            log.warning("stream of %s failed: %s; readers fetch their pages themselves", self.ref.url, exc)
        finally:
            self._finish(error)

    def _skip_held(self, page: int) -> int:
        """The first page from ``page`` on that no tier holds (no request for held pages)."""
        while page < self.total and self.owner.cached(self.key(page)):
            page += 1
        with self._lock:
            self._claim_next = max(self._claim_next, page)
        return page

    def _next_own(self, page: int) -> int:
        """The first page from ``page`` on that this stream has claimed, once the reader is
        near it (``total`` when there is none or the stream stopped). Pages a tier holds or
        another fetch has in flight are not this stream's to download: skipped."""
        while True:
            page = self._skip_held(page)
            if page >= self.total or not self._wait_for_reader(page):
                return self.total
            self._claim_upto(self._claim_limit(page))
            if self._owns(page):
                return page
            page += 1

    def _worth_skipping(self, page: int, end: int) -> bool:
        """Whether to end the request before ``page``, which this stream does not own.

        A sequential stream always does: a reader is following it, and no byte of a page
        someone else fetches may come twice. A fill (background, no reader) does only before
        ``FILL_SKIP_PAGES`` pages in a row that others hold or fetch: a random reader's
        scattered pages cost less received again than a new request each (moto even reads
        the whole object for every request); a warm-up's stretch of pages does not.
        """
        if not self.fill:
            return True
        stop = min(end, page + FILL_SKIP_PAGES)
        for index in range(page, stop):
            key = self.key(index)
            if not (self.owner.cached(key) or self.owner.flight.in_flight(key)):
                return False
        return stop - page == FILL_SKIP_PAGES

    def _owns(self, page: int) -> bool:
        """Whether this stream holds the claim of ``page`` (waits for a claim being made)."""
        with self._lock:
            while page in self._claiming and not self._stopped:
                self._lock.wait()
            return page in self._claims

    def _stream_range(self, page: int, end: int) -> int:
        """Stream pages ``page..end-1`` (``page`` claimed); returns the next page, or
        ``total`` when stopped. The request ends early at a page this stream does not own.

        Chunks are asked for page-sized, so a page usually is one chunk, stored as it came
        (no copy); otherwise its parts are joined once.
        """
        ps = self.page_size
        stop = min(self.ref.size, end * ps)
        chunks = self.owner.origin.stream(
            self.ref.url, self.ref.etag, page * ps, stop, chunk_size=ps, to_end=stop == self.ref.size
        )
        self.owner.count(requests=1)
        parts: list[bytes | memoryview] = []
        have = 0
        try:
            for chunk in chunks:
                if self._stopped:
                    return self.total
                self.owner.count(bytes=len(chunk))
                view = memoryview(chunk)
                while view and page < end:
                    need = page_length(self.ref, ps, page) - have
                    if not parts and len(chunk) == need and len(view) == need:
                        parts.append(chunk)  # the whole page in one chunk: keep it as is
                    else:
                        parts.append(view[:need])
                    have += min(need, len(view))
                    view = view[need:]
                    if have < page_length(self.ref, ps, page):
                        break
                    data = parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)
                    parts, have = [], 0
                    self._deliver(page, data)
                    page += 1
                    if page < end and not self._wait_for_reader(page):
                        return self.total
                    self._claim_upto(self._claim_limit(page))
                    if page < end and not self._owns(page) and self._worth_skipping(page, end):
                        return page  # someone else fetches it: end this request, resume after it
        finally:
            chunks.close()
        return page

    def _deliver(self, index: int, data: bytes) -> None:
        with self._lock:
            while index in self._claiming and not self._stopped:  # its claim is being made
                self._lock.wait()
            if self._stopped:
                return
            claim = self._claims.pop(index, None)
        key = self.key(index)
        if claim is None:  # held by a tier or fetched by someone else meanwhile
            self.owner.count(skipped=1)
            return
        try:
            self.owner.keep(key, data, not self.fill, first=True)  # the fastest tier, then waiters
        finally:
            self.owner.flight.settle(key, claim, value=data)
        self.owner.writer.submit(key, data, not self.fill)  # the slower tiers, while the next page arrives
        self.owner.count(pages=1)

    def _wait_for_reader(self, page: int) -> bool:
        """Sequential: block until ``page`` is within the reader's window; False = stop."""
        if self.fill:
            return not self._stopped
        idle = self.owner.idle_seconds
        with self._lock:
            while not self._stopped and page > self._reader + self.owner.ahead_pages:
                remaining = self._last_read + idle - self.owner.clock()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
            waiting = not self._stopped and page > self._reader + self.owner.ahead_pages
        if waiting:  # the reader went away: give the request up
            log.debug("stream of %s idle for %.1fs: stopped", self.ref.url, idle)
            self.stop()
        return not self._stopped

    def _finish(self, error: BaseException | None) -> None:
        with self._lock:
            self._stopped = True
            claims, self._claims = self._claims, {}
        for index, claim in claims.items():
            self.owner.flight.settle(self.key(index), claim, error=error or Abandoned())
        self.owner.finished(self)


class Streams:
    """The cache's streams: which object has one, starting and stopping them, counters."""

    def __init__(
        self,
        origin: Origin,
        flight: SingleFlight[bytes],
        *,
        page_size: int,
        cached: Callable[[PageKey], bool],
        keep: Callable[..., None],  # keep(key, data, hot, first=True/False): fastest tier / the rest
        min_bytes: int = 64 * 1024**2,
        ahead_bytes: int = 64 * 1024**2,
        max_sequential: int = 4,
        idle_seconds: float = 10.0,
        max_fills: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.origin = origin
        self.flight = flight
        self.page_size = page_size
        self.cached = cached
        self.keep = keep
        # the pages queued for the disk are in the RAM tier too, so a deeper queue costs little
        # memory and lets a reader finish while the disk (slower than loopback S3 here) catches up
        self.writer = LowerTierWriter(keep, WRITE_BEHIND_WINDOWS * max(ahead_bytes, 2 * page_size))
        self.min_bytes = min_bytes
        self.ahead_pages = max(1, ahead_bytes // page_size)
        self.max_sequential = max(0, max_sequential)
        self.idle_seconds = idle_seconds
        self.max_fills = max(0, max_fills)
        self.clock = clock
        self.counters = StreamCounters()
        self._lock = threading.Lock()
        self._active: dict[tuple[str, str], PageStream] = {}  # the stream serving each object
        self._live: set[PageStream] = set()  # streams whose thread has not ended (close joins them)
        self._closed = False

    def follow(
        self, ref: ObjectRef, first: int, last: int, sequential: bool, *, reader: Hashable = None
    ) -> bool:
        """``reader`` is about to read pages ``first..last`` of ``ref``: feed or start a stream.

        True when a stream covers what comes next (no readahead run is needed). A sequential
        stream follows one reader: another reader of the same object neither moves nor stops
        it (the caller falls back to readahead runs, which skip the pages the stream holds).
        """
        if not self.min_bytes or ref.size < self.min_bytes:
            return False
        oid = (ref.url, ref.etag)
        with self._lock:
            current = self._active.get(oid)
        if current is not None:
            if current.fill:
                return True
            if current.reader != reader:
                return False
            if current.advance(first, last):
                return True
            self._forget(current)  # it stopped (jumped away, idle or done): make room for a new one
        if sequential:
            return self._start(ref, first, fill=False, reader_page=last, reader=reader)
        return False

    def note_read_now(self, ref: ObjectRef, first: int, last: int, *, reader: Hashable = None) -> bool:
        """A read of RAM-held pages answered inline: True if a sequential stream follows this
        reader and has been told (then the read needs nothing else); never blocks or does I/O."""
        with self._lock:
            current = self._active.get((ref.url, ref.etag))
        return (
            current is not None
            and not current.fill
            and current.reader == reader
            and current.note_reader(first, last)
        )

    def fill(self, ref: ObjectRef) -> bool:
        """Stream the whole of ``ref`` into the cache in the background (the prefetcher
        decides when); False if no fill may start now."""
        return self.max_fills > 0 and self._start(ref, 0, fill=True)

    def _start(
        self, ref: ObjectRef, first: int, *, fill: bool, reader_page: int = -1, reader: Hashable = None
    ) -> bool:
        total = page_count(ref.size, self.page_size)
        if not fill:  # a reader inside cached pages needs no stream (and no thread) yet
            window = range(first, min(total, first + self.ahead_pages))
            if all(self.cached(page_key(ref, self.page_size, i)) for i in window):
                return True
        if first >= total:
            return not fill
        oid = (ref.url, ref.etag)
        with self._lock:
            running = sum(1 for s in self._active.values() if s.fill == fill)
            if (
                self._closed
                or oid in self._active
                or running >= (self.max_fills if fill else self.max_sequential)
            ):
                return False
            stream = self._active[oid] = PageStream(
                self, ref, first, fill=fill, reader_page=reader_page, reader=reader
            )
            self._live.add(stream)
            self.counters.add("fills" if fill else "sequential")
        if not fill:  # claim the reader's window now: its next read must not race the thread
            stream._claim_upto(stream._claim_limit(first))
        stream.thread.start()
        return True

    def _forget(self, stream: PageStream) -> None:
        with self._lock:
            if self._active.get((stream.ref.url, stream.ref.etag)) is stream:
                del self._active[(stream.ref.url, stream.ref.etag)]

    def finished(self, stream: PageStream) -> None:
        """The stream's thread is ending."""
        self._forget(stream)
        with self._lock:
            self._live.discard(stream)

    def count(self, **fields: int) -> None:
        self.counters.add_many(**fields)

    def stats(self) -> dict:
        with self._lock:
            active = list(self._active.values())
            return {
                **self.counters.snapshot(),
                "active": len(active),
                "active_fills": sum(1 for s in active if s.fill),
                "running": len(self._live),  # threads, including stopped ones still ending
                "write_queue_bytes": self.writer.queued_bytes(),  # pages waiting for the disk tier
            }

    def close(self, timeout: float = 10.0) -> None:
        """Stop every stream and wait for its thread (a chunk in transit ends it)."""
        with self._lock:
            self._closed = True
            streams = list(self._live)
        for stream in streams:
            stream.stop()
        deadline = time.monotonic() + timeout
        for stream in streams:
            stream.thread.join(max(0.0, deadline - time.monotonic()))
        self.writer.close(max(0.0, deadline - time.monotonic()))
