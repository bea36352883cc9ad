"""The origin: the object store behind the cache, read in page-sized ranges under If-Match.

Every range read carries the etag the page is named by, so an object replaced behind a
snapshot raises ObjectChanged instead of returning bytes of another object (promise 1);
a short answer is treated the same way. A content-addressed blob replaced by its own bytes
still reads, once its bytes hash to its name (``datahub.cache.selfverify``). Every request takes a slot of the process's origin
scheduler (``datahub.cache.scheduler``: priority classes, adaptive concurrency starting at
``origin_concurrency``). Retries are not repeated here: the storage layer retries
transient failures (503, throttling, resets, timeouts) in its one retry policy
(``datahub.storage.retry``, ``s3.max_attempts``), and what it gives up on reaches the
reader as TransientStorageError.

An object whose read ended in a genuine timeout (a stalled origin) is not asked again for
a few seconds: a read in that window fails at once with the same error. What is
remembered, for how long and why is ``datahub.cache.stall_memory``'s: only timeouts, never
refused connections, resets or 5xx; a fixed time after the failure, never renewed by a
caller who only met the memory; forgotten at once when the same endpoint answers a request
that began after the failure.

``stream`` reads a long range as chunks of ONE request (``ObjectStore.read_chunks``), for
the cache's large-object streams (datahub.cache.stream); it holds one origin slot while
the stream is open and checks the total length like ``fetch``.

``watch(listener)`` tells a listener every object version the origin answered with bytes:
a bucket mount serves a page only to a mount whose own credentials S3 let read the object
(``fuse_adapter.bucket_access``), and a page this process fetched itself is that proof, so
a cold read needs no second request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from datahub.cache import selfverify
from datahub.cache.counters import Counters
from datahub.cache.pages import PageKey
from datahub.cache.scheduler import OriginScheduler
from datahub.cache.stall_memory import STALL_MEMORY, StallMemory
from datahub.errors import ObjectChanged
from datahub.storage.base import ObjectStore

STREAM_CHUNK = 1 << 20  # bytes per chunk of a streaming read
T = TypeVar("T")


def read_range(stores, key: PageKey, start: int, end: int, *, to_end: bool) -> bytes:  # stores: StoreRegistry
    """Bytes ``[start, end)`` of the object version ``key`` names, read under If-Match; a
    short answer raises ObjectChanged. The one origin read of a page, in this process or in
    a fetch worker.

    ``to_end``: ``end`` is where the caller's record says the object ends (the range holds
    the record's last page). The etag pins the object, not the size a record claims for it,
    and a ranged answer that ends where it was asked to says nothing of what follows: such a
    range asks for one byte more, which only an object longer than its record has, and the
    length check below turns that into ObjectChanged. Whether a page is the last cannot be
    told from its name or its length (a record of whole pages ends on a page boundary), so
    the caller, who holds the record, says it."""
    # Always a bounded range, a small object's only page too: a record claiming a few bytes
    # of a multi-GB object then costs those bytes and one more, never the whole body before
    # the length check (bench/cache/short_record_get.py: the Range header's client CPU).
    store, object_key = stores.for_url(key.url)
    stop = end + 1 if to_end else end
    data = selfverify.read(stores, store, object_key, key.url, key.etag, start, stop)
    if len(data) != end - start:
        raise ObjectChanged(
            f"object {key.url} returned {len(data)} bytes for range [{start}, {end}) of etag {key.etag}: "
            "it changed behind the snapshot; re-import the object or read a version that records it",
            url=key.url,
            etag=key.etag,
        )
    return data


class OriginCounters(Counters):
    """Bumped by every thread that reads through the origin (as many as the scheduler admits)."""

    FIELDS = (
        "fetches",  # requests, streams included
        "bytes",
        "errors",
        "streams",  # of the fetches, streaming reads
    )


class Origin:
    def __init__(
        self,
        stores,  # datahub.storage.StoreRegistry
        concurrency: int = 16,
        *,
        scheduler: OriginScheduler | None = None,
        stall_seconds: float = STALL_MEMORY,
    ) -> None:
        """``scheduler``: the process's (``process_scheduler``); else a private one starting at
        ``concurrency``. ``stall_seconds``: how long a timed-out object fails at once
        (``cache.stall_memory_seconds``)."""
        self.stores = stores
        self.scheduler = scheduler or OriginScheduler(concurrency)
        self.counters = OriginCounters()
        self.stalls = StallMemory(stall_seconds)
        self._listeners: list[Callable[[str, str], None]] = []

    def watch(self, listener: Callable[[str, str], None]) -> None:
        """Call ``listener(url, etag)`` (on the reading thread) whenever the origin answered a
        read of that object version with bytes: the store let this process's credentials
        read it."""
        self._listeners.append(listener)

    def _answered(self, url: str, etag: str) -> None:
        for listener in self._listeners:
            listener(url, etag)

    def fetch(self, key: PageKey, start: int, end: int, *, to_end: bool = False) -> bytes:
        """Bytes ``[start, end)`` of the object version ``key`` names; ``to_end``: ``end`` is
        where the caller's record ends (``read_range``)."""
        return self.fetch_via(
            key, start, end, lambda: read_range(self.stores, key, start, end, to_end=to_end), len
        )

    def fetch_via(
        self, key: PageKey, start: int, end: int, read: Callable[[], T], size: Callable[[T], int]
    ) -> T:
        """``read()`` the range ``[start, end)`` of ``key`` under this origin's rules: the
        stall memory, one scheduler slot in the caller's class, the counters. ``size(result)``
        is the bytes it read. Why: a fetch worker process (``datahub.cache.fetch_workers``)
        makes the request, but its slot and its accounting stay this process's, so limits and
        priority classes hold across workers."""
        self.stalls.check(key.url, key.etag)  # outside the try: meeting the memory never renews it
        try:
            with self.scheduler.slot(end - start):
                started = time.monotonic()
                result = read()
        except Exception as exc:  # counted and re-raised, whatever it is
            self.counters.add("errors")
            self.stalls.failed(key.url, key.etag, exc)
            raise
        self.stalls.answered(key.url, started)
        self.counters.add_many(fetches=1, bytes=size(result))
        self._answered(key.url, key.etag)
        return result

    def streams_natively(self, url: str) -> bool:
        """Whether the store behind ``url`` serves ``read_chunks`` from one open request.

        The contract's default ``read_chunks`` reads the whole range in one piece, so a
        stream over such a store must ask for bounded ranges (datahub.cache.stream).
        """
        store, _ = self.stores.for_url(url)
        return type(store).read_chunks is not ObjectStore.read_chunks

    def stream(
        self,
        url: str,
        etag: str,
        start: int,
        end: int,
        chunk_size: int = STREAM_CHUNK,
        *,
        to_end: bool = False,
    ) -> Iterator[bytes]:
        """Bytes ``[start, end)`` of the object version ``(url, etag)`` as chunks, under If-Match.

        A stream that ends short or runs long raises ObjectChanged (after the chunks that
        fit). ``to_end``: ``end`` is where the record says the object ends; one byte more is
        asked for, so an object longer than its record runs long (as in ``read_range``), and
        the chunk that reaches ``end`` is yielded only once the answer ended there (else a
        consumer would store the record's last page before the extra byte arrived).
        Close the generator to end the request early; the origin slot is released then.
        """
        self.stalls.check(url, etag)
        store, object_key = self.stores.for_url(url)
        want, got = end - start, 0
        last: bytes | None = None  # to_end: the chunk that reaches ``end``, held until the answer ends
        with self.scheduler.slot(min(chunk_size, end - start), sample=False):
            started = time.monotonic()
            self.counters.add_many(fetches=1, streams=1)
            stop = end + 1 if to_end else end
            chunks = selfverify.read_chunks(
                self.stores, store, object_key, url, etag, start, stop, chunk_size
            )
            try:
                for chunk in chunks:
                    if not got:
                        self.stalls.answered(url, started)
                        self._answered(url, etag)
                    got += len(chunk)
                    if got > want:
                        break
                    self.counters.add("bytes", len(chunk))
                    if to_end and got == want:
                        # The record's last bytes: a consumer stores them as the record's last
                        # page, so they are handed out only once the object proves to end here
                        # (a chunk boundary on the record's end leaves the extra byte for the
                        # next chunk).
                        last = chunk
                        continue
                    yield chunk
            except GeneratorExit:
                raise
            except Exception as exc:  # counted and re-raised, whatever it is
                self.counters.add("errors")
                self.stalls.failed(url, etag, exc)
                raise
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()  # ends the request at once when the consumer stops early
        if got != want:
            self.counters.add("errors")
            raise ObjectChanged(
                f"object {url} streamed {got} bytes for range [{start}, {end}) of etag {etag}: "
                "it changed behind the snapshot; re-import the object or read a version that records it",
                url=url,
                etag=etag,
            )
        if last is not None:
            yield last

    def stats(self) -> dict:
        return {**self.counters.snapshot(), "scheduler": self.scheduler.stats()}
