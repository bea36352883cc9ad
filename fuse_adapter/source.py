"""Where a read-only mount gets its bytes: always the tiered cache.

The mount speaks the cache's shape, ``read(ref, offset, size, reader=...) -> bytes``
(verified bytes of the immutable object ``ref``) and holds no read policy: the cache's
prefetcher decides what to read ahead. ``--no-cache`` is the same cache with a small RAM
tier only (``NO_CACHE_RAM_BYTES``, nothing on disk), so read-ahead has one owner
whichever way a mount is configured.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Protocol

from datahub.config import Config
from datahub.storage.base import ObjectRef

log = logging.getLogger(__name__)

NO_CACHE_RAM_BYTES = 256 * 1024**2  # ``--no-cache``: RAM for read-ahead and the pages being read


class ByteSource(Protocol):
    def read(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None, *, reader: Hashable = None
    ) -> bytes | memoryview:
        """Bytes ``[offset, offset+size)`` of ``ref``; ObjectChanged/ObjectNotFound if it moved.
        ``reader`` (an open handle) lets the source tell sequential readers apart."""
        ...

    def read_cached(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None
    ) -> bytes | memoryview | None:
        """The bytes if they can be had at once without I/O (in RAM), else None."""
        ...

    def hint(self, refs: Sequence[ObjectRef]) -> None:
        """Upcoming read order (best effort)."""
        ...

    def prefetch(
        self, refs: Iterable[ObjectRef], *, cancel: threading.Event | None = None, progress=None
    ) -> object:
        """Warm these objects (blocking; run in a worker thread; stops when ``cancel`` is set);
        ``progress.update(objects, nbytes)`` as it goes."""
        ...

    def watch_requests(self, counter: Callable[[], int]) -> None:
        """A counter of the mount's requests: while it moves, readers are busy (warm-up waits)."""
        ...

    def holds(self, ref: ObjectRef) -> bool:
        """Whether ``ref`` is cached on this node (its first page, in a local tier)."""
        ...

    def idle_for(self) -> float:
        """Seconds since a reader last read or sent a request (inf: none yet)."""
        ...

    def warm_room(self) -> int:
        """The most bytes a warm-up may bring in without evicting any of them."""
        ...

    def report_warmup(self, status: Callable[[], dict]) -> None:
        """Show a mount's warm-up status in the cache's stats."""
        ...

    def backing_fd(self, ref: ObjectRef, *, verify: bool = True, fetch: bool = False) -> int | None:
        """A descriptor of a local file holding exactly the verified bytes of ``ref`` (a FUSE
        passthrough backing file; the caller closes it), or None. ``verify=False``: without
        reading data; -1 if it would have to (then call again with ``verify=True``), -2 if
        the cache does not hold it (``fetch=True`` reads it in first)."""
        ...

    def backing_unchanged(self, ref: ObjectRef, fd: int) -> bool:
        """Whether the descriptor ``fd`` (from :meth:`backing_fd`) is still in the state it
        was verified in (one ``fstat``, no data read)."""
        ...

    def backing_check(self, ref: ObjectRef, fd: int) -> bool:
        """Whether the descriptor ``fd`` (a backing file from :meth:`backing_fd` that has
        changed since) still holds exactly the verified bytes of ``ref`` (reads it whole)."""
        ...

    def watch_backing(self, listener: Callable[[int, int], None]) -> None:
        """Call ``listener(st_dev, st_ino)`` (from any thread) for each backing file the
        cache evicts."""
        ...

    def backing_hits(self, refs: list[ObjectRef]) -> None:
        """Opens the kernel was answered for without the daemon (pyfuse3's C code): hits."""
        ...

    def report_mount(self, status: Callable[[], dict]) -> None:
        """Show a mount's open mode (passthrough or not) and counts in the cache's stats."""
        ...

    def watch_origin(self, listener: Callable[[str, str], None]) -> None:
        """Call ``listener(url, etag)`` for every object version this process read from the
        origin itself (with its own credentials)."""
        ...

    def backs_files(self) -> bool:
        """Whether :meth:`backing_fd` can return files (a disk tier of format-3 page files)."""
        ...

    def close(self) -> None: ...


class CacheSource:
    """The tiered cache (``datahub.cache.open_cache``): verified pages, readahead, prefetch."""

    def __init__(self, cache) -> None:  # cache: datahub.cache.TieredCache
        self._cache = cache

    def read(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None, *, reader: Hashable = None
    ) -> bytes | memoryview:
        if size is not None:
            size = max(0, min(size, ref.size - offset))
        return self._cache.read(ref, offset, size, view=True, reader=reader)  # a view into the page: no copy

    def read_cached(
        self, ref: ObjectRef, offset: int = 0, size: int | None = None
    ) -> bytes | memoryview | None:
        return self._cache.read_cached(ref, offset, size)

    def hint(self, refs: Sequence[ObjectRef]) -> None:
        self._cache.hint(refs)

    def prefetch(
        self, refs: Iterable[ObjectRef], *, cancel: threading.Event | None = None, progress=None
    ) -> object:
        return self._cache.prefetch(refs, cancel=cancel, progress=progress)

    def watch_requests(self, counter: Callable[[], int]) -> None:
        self._cache.activity.watch(counter)

    def holds(self, ref: ObjectRef) -> bool:
        return self._cache.holds(ref)

    def idle_for(self) -> float:
        return self._cache.activity.idle_for()

    def warm_room(self) -> int:
        return self._cache.warm_room()

    def report_warmup(self, status: Callable[[], dict]) -> None:
        self._cache.reports.add_warmup(status)

    def backing_fd(self, ref: ObjectRef, *, verify: bool = True, fetch: bool = False) -> int | None:
        return self._cache.passthrough.fd(ref, verify=verify, fetch=fetch)

    def backing_unchanged(self, ref: ObjectRef, fd: int) -> bool:
        return self._cache.passthrough.unchanged(ref, fd)

    def backing_check(self, ref: ObjectRef, fd: int) -> bool:
        return self._cache.passthrough.check(ref, fd)

    def watch_backing(self, listener: Callable[[int, int], None]) -> None:
        self._cache.passthrough.watch(listener)

    def backing_hits(self, refs: list[ObjectRef]) -> None:
        self._cache.passthrough.hits(refs)

    def backs_files(self) -> bool:
        return self._cache.passthrough.available()

    def report_mount(self, status: Callable[[], dict]) -> None:
        self._cache.reports.add_mount(status)

    def watch_origin(self, listener: Callable[[str, str], None]) -> None:
        self._cache.origin.watch(listener)

    def close(self) -> None:
        self._cache.close()


def open_source(config: Config, stores, *, use_cache: bool = True) -> ByteSource:
    """The tiered cache; without ``use_cache`` one that keeps nothing on disk or in a shared
    tier and little in RAM (what ``--no-cache`` and the CSI profile "none" promise)."""
    from datahub.cache import open_cache

    if not use_cache:
        c = config.cache
        small = c.model_copy(update={"disk_bytes": 0, "shared_url": "", "ram_bytes": NO_CACHE_RAM_BYTES})
        config = config.model_copy(update={"cache": small})
    # a mount daemon fetches cold pages in worker processes (cache.fetch_workers): its
    # request loop keeps a core while the origin's client and the page files use others
    return CacheSource(open_cache(config, stores, fetch_workers=use_cache))
