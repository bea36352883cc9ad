"""The origin: the object store behind the cache, read in page-sized ranges under If-Match.

Every range read carries the etag the page is named by, so an object replaced behind a
snapshot raises ObjectChanged instead of returning bytes of another object (promise 1);
a short answer is treated the same way. Every request takes a slot of the process's origin
scheduler (``datahub.cache.scheduler``: priority classes, adaptive concurrency starting at
``origin_concurrency``). Retries are not repeated here: the storage layer retries
transient failures (503, throttling, resets, timeouts) in its one retry policy
(``datahub.storage.retry``, ``s3.max_attempts``), and what it gives up on reaches the
reader as TransientStorageError.

An object whose read ended in a timeout (a stalled origin: the storage layer's attempts
or its budget, ``s3.total_timeout``, ran out on timeouts) is not asked again for ``STALL_MEMORY`` seconds: a read
in that window fails at once with the same error. Why: the kernel re-asks a failed
readahead at once with a synchronous read of the same page, so without this one read()
through a mount waited two budgets. Fast failures (503, refused) are not remembered, so a
recovered origin is seen at once.

``stream`` reads a long range as chunks of ONE request (``ObjectStore.read_chunks``), for
the cache's large-object streams (datahub.cache.stream); it holds one origin slot while
the stream is open and checks the total length like ``fetch``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from datahub.cache.counters import Counters
from datahub.cache.pages import PageKey
from datahub.cache.scheduler import OriginScheduler
from datahub.errors import ObjectChanged, TransientStorageError
from datahub.storage.base import ObjectStore

STREAM_CHUNK = 1 << 20  # bytes per chunk of a streaming read
STALL_MEMORY = 5.0  # seconds a timed-out object fails at once instead of being asked again


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
        self, stores, concurrency: int = 16, *, scheduler: OriginScheduler | None = None
    ) -> None:  # stores: datahub.storage.StoreRegistry
        """``scheduler``: the process's (``process_scheduler``); else a private one starting at ``concurrency``."""
        self.stores = stores
        self.scheduler = scheduler or OriginScheduler(concurrency)
        self.counters = OriginCounters()
        self._stalled: dict[tuple[str, str], tuple[float, TransientStorageError]] = {}

    def _check_stalled(self, url: str, etag: str) -> None:
        """Raise the timeout of ``(url, etag)`` again if it happened within ``STALL_MEMORY``."""
        hit = self._stalled.get((url, etag))
        if hit is None:
            return
        at, exc = hit
        if time.monotonic() - at >= STALL_MEMORY:
            self._stalled.pop((url, etag), None)
            return
        raise TransientStorageError(
            f"{exc.message} (not asked again within {STALL_MEMORY:g} s of timing out)", **exc.details
        )

    def _remember(self, url: str, etag: str, exc: Exception) -> None:
        if isinstance(exc, TransientStorageError) and exc.details.get("timed_out"):
            if len(self._stalled) > 1024:
                self._stalled.clear()  # bounded: a stalled origin with many objects
            self._stalled[(url, etag)] = (time.monotonic(), exc)

    def fetch(self, key: PageKey, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object version ``key`` names."""
        # A short first page is the whole object: read it without a Range header (cheaper
        # for S3 servers; the etag pins the size, and the length is checked below anyway).
        whole = start == 0 and end - start < key.page_size
        try:
            self._check_stalled(key.url, key.etag)
            store, object_key = self.stores.for_url(key.url)
            with self.scheduler.slot(end - start):
                data = store.read(object_key, start, None if whole else end, etag=key.etag)
        except Exception as exc:  # counted and re-raised, whatever it is
            self.counters.add("errors")
            self._remember(key.url, key.etag, exc)
            raise
        if len(data) != end - start:
            self.counters.add("errors")
            raise ObjectChanged(
                f"object {key.url} returned {len(data)} bytes for range [{start}, {end}) of etag {key.etag}: "
                "it changed behind the snapshot; re-import the object or read a version that records it",
                url=key.url,
                etag=key.etag,
            )
        self.counters.add_many(fetches=1, bytes=len(data))
        return data

    def streams_natively(self, url: str) -> bool:
        """Whether the store behind ``url`` serves ``read_chunks`` from one open request.

        The contract's default ``read_chunks`` reads the whole range in one piece, so a
        stream over such a store must ask for bounded ranges (datahub.cache.stream).
        """
        store, _ = self.stores.for_url(url)
        return type(store).read_chunks is not ObjectStore.read_chunks

    def stream(
        self, url: str, etag: str, start: int, end: int, chunk_size: int = STREAM_CHUNK
    ) -> Iterator[bytes]:
        """Bytes ``[start, end)`` of the object version ``(url, etag)`` as chunks, under If-Match.

        A stream that ends short or runs long raises ObjectChanged (after the chunks that
        fit). Close the generator to end the request early; the origin slot is released then.
        """
        self._check_stalled(url, etag)
        store, object_key = self.stores.for_url(url)
        want, got = end - start, 0
        with self.scheduler.slot(min(chunk_size, end - start), sample=False):
            self.counters.add_many(fetches=1, streams=1)
            chunks = store.read_chunks(object_key, start, end, etag=etag, chunk_size=chunk_size)
            try:
                for chunk in chunks:
                    got += len(chunk)
                    if got > want:
                        break
                    self.counters.add("bytes", len(chunk))
                    yield chunk
            except GeneratorExit:
                raise
            except Exception as exc:  # counted and re-raised, whatever it is
                self.counters.add("errors")
                self._remember(url, etag, exc)
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

    def stats(self) -> dict:
        return {**self.counters.snapshot(), "scheduler": self.scheduler.stats()}
