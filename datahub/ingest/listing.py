"""Listing a bucket prefix for an import with several LISTs in flight, in key order.

Why: one ListObjectsV2 stream returns ~1,000 keys per round trip, so 10^8 objects are 10^5
sequential requests (hours at tens of ms each). Keys below different sub-prefixes can be
listed independently, and the listing of a prefix is a contiguous run of the whole key
order, so the import lists the sub-prefixes on a thread pool and yields their runs one after
another: the same objects in the same order as one ``store.list()``.

- The sub-prefixes come from the store's delimiter listing (``list_dir``), descending one
  more level while a level has fewer sub-prefixes than workers (``train/`` alone would be one
  stream), at most ``max_depth`` levels.
- Memory stays bounded: at most ``workers`` prefixes are listed ahead of the one being
  yielded, each holding at most ``pages_ahead`` pages of object infos.
- A store without a delimiter listing of its own (local, memory) lists once: its
  ``list_dir`` would read every key anyway.
- An error in any LIST is raised to the consumer, and closing the iterator stops the workers.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from datahub.storage.base import ObjectInfo, ObjectStore

WORKERS = 8
PAGES_AHEAD = 4
PAGE = 1000
MAX_DEPTH = 3
_DONE = object()


def parallel_list(
    store: ObjectStore,
    *,
    workers: int = WORKERS,
    pages_ahead: int = PAGES_AHEAD,
    max_depth: int = MAX_DEPTH,
) -> Iterator[ObjectInfo]:
    """Every object of ``store`` in key order, as ``store.list()`` yields them."""
    if type(store).list_dir is ObjectStore.list_dir or workers <= 1:
        yield from store.list()
        return
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="import-list")
    ahead: deque[ObjectInfo | queue.Queue] = deque()
    units = _units(store, "", workers, max_depth)
    try:
        for unit in units:
            ahead.append(
                unit if isinstance(unit, ObjectInfo) else _start(pool, store, unit, pages_ahead, stop)
            )
            while ahead and (sum(isinstance(u, queue.Queue) for u in ahead) >= workers or len(ahead) > PAGE):
                yield from _drain(ahead.popleft())
        while ahead:
            yield from _drain(ahead.popleft())
    finally:
        stop.set()
        for unit in ahead:  # unblock workers waiting on a full queue
            if isinstance(unit, queue.Queue):
                _empty(unit)
        pool.shutdown(wait=True, cancel_futures=True)


def _units(store: ObjectStore, prefix: str, workers: int, depth: int) -> Iterator[ObjectInfo | str]:
    """Objects directly below ``prefix`` and sub-prefixes to list whole, in key order; a level
    with fewer than ``workers`` sub-prefixes is replaced by the level below it."""
    level: list[ObjectInfo | str] = []
    subdirs = 0
    entries = store.list_dir(prefix)
    for entry in entries:
        level.append(entry)
        subdirs += isinstance(entry, str)
        if subdirs >= workers or len(level) >= PAGE * workers:
            break  # enough parallelism (or a large flat level): stream the rest as it comes
    else:
        if depth > 1 and 0 < subdirs < workers:
            for entry in level:
                if isinstance(entry, str):
                    yield from _units(store, entry, workers, depth - 1)
                else:
                    yield entry
            return
    yield from level
    yield from entries


def _start(
    pool: ThreadPoolExecutor, store: ObjectStore, prefix: str, pages_ahead: int, stop: threading.Event
) -> queue.Queue:
    """List ``prefix`` on the pool into a bounded queue of pages (then _DONE or the error)."""
    pages: queue.Queue = queue.Queue(maxsize=pages_ahead)

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                pages.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            page: list[ObjectInfo] = []
            for info in store.list(prefix):
                page.append(info)
                if len(page) >= PAGE:
                    if not put(page):
                        return
                    page = []
            if page and not put(page):
                return
            put(_DONE)
        except BaseException as exc:
            put(exc)

    pool.submit(run)
    return pages


def _drain(unit: ObjectInfo | queue.Queue) -> Iterator[ObjectInfo]:
    if isinstance(unit, ObjectInfo):
        yield unit
        return
    while True:
        item = unit.get()
        if item is _DONE:
            return
        if isinstance(item, BaseException):
            raise item
        yield from item


def _empty(pages: queue.Queue) -> None:
    while True:
        try:
            pages.get_nowait()
        except queue.Empty:
            return
