"""Fetching ahead of readers: prefetch (warm a set of objects), hints and readahead.

- ``run_prefetch`` warms every page of a set of refs with bounded concurrency, progress
  and cancellation. Pages already in a persistent tier are skipped, so a rerun after an
  interruption resumes where it stopped. It blocks rather than drops: the caller asked.
- ``HintAhead`` follows a reader's announced order (a training sampler's upcoming keys)
  and keeps the next objects fetched while the bytes fetched but not yet read stay within
  ``hint_budget_bytes``; a read of a hinted object releases it and everything before it.
- ``BackgroundFetcher`` runs speculative work (readahead) on a few threads behind a queue
  bounded in bytes; when the queue is full new work is dropped, never waited for.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from datahub.cache.tier import TIER_ERRORS
from datahub.errors import DatahubError
from datahub.storage.base import ObjectRef

log = logging.getLogger(__name__)

MAX_REPORTED_FAILURES = 100


@dataclass
class PrefetchReport:
    objects: int = 0  # refs looked at
    pages_fetched: int = 0  # pages brought in by this run
    pages_cached: int = 0  # pages found already cached (skipped: resume)
    bytes_fetched: int = 0
    failed: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)  # (url, message), first 100
    cancelled: bool = False

    def as_dict(self) -> dict:
        return {
            "objects": self.objects,
            "pages_fetched": self.pages_fetched,
            "pages_cached": self.pages_cached,
            "bytes_fetched": self.bytes_fetched,
            "failed": self.failed,
            "errors": [{"url": u, "error": e} for u, e in self.errors],
            "cancelled": self.cancelled,
        }


def run_prefetch(
    refs: Iterable[ObjectRef],
    warm: Callable[[ObjectRef], tuple[int, int, int]],
    *,
    concurrency: int,
    progress=None,
    cancel: threading.Event | None = None,
) -> PrefetchReport:
    """Call ``warm(ref) -> (pages fetched, pages already cached, bytes fetched)`` for each ref.

    ``concurrency`` worker threads each take the next ref from ``refs`` and warm it, so at
    most ``concurrency`` refs are in flight and a generator of ten million records is
    consumed as the work proceeds, never materialised. Why workers pulling from the
    iterator rather than a pool with one future per ref: a future, a Python-level
    semaphore and a queue hand-off per object cost more CPU than warming a small cached
    object's bookkeeping, and the run is CPU-bound on small nodes. An error raised by
    ``refs`` itself stops the run and is raised here once the refs in flight are done.
    """
    report = PrefetchReport()
    cancel = cancel or threading.Event()
    source = iter(refs)
    take_lock = threading.Lock()  # one taker at a time: iterators are not thread-safe
    lock = threading.Lock()  # the report
    failure: list[BaseException] = []

    def take() -> ObjectRef | None:
        with take_lock:
            if cancel.is_set() or failure:
                return None
            try:
                ref = next(source)
            except StopIteration:
                return None
            except BaseException as exc:  # the caller's iterator failed: stop, raise it below
                failure.append(exc)
                return None
            report.objects += 1
            return ref

    def work() -> None:
        while (ref := take()) is not None:
            try:
                fetched, cached, nbytes = warm(ref)
            except Exception as exc:  # a worker's top level: counted per ref, reported, never fatal
                message = exc.message if isinstance(exc, DatahubError) else f"{type(exc).__name__}: {exc}"
                if not isinstance(exc, DatahubError):
                    log.warning("prefetch of %s failed unexpectedly: %s", ref.url, message)
                with lock:
                    report.failed += 1
                    if len(report.errors) < MAX_REPORTED_FAILURES:
                        report.errors.append((ref.url, message))
                continue
            with lock:
                report.pages_fetched += fetched
                report.pages_cached += cached
                report.bytes_fetched += nbytes
            if progress is not None:
                progress.update(1, nbytes)

    workers = [
        threading.Thread(target=work, name=f"datahub-prefetch-{i}", daemon=True)
        for i in range(max(1, concurrency))
    ]
    for t in workers:
        t.start()
    try:
        for t in workers:
            t.join()
    except KeyboardInterrupt:
        cancel.set()  # no new refs are taken; wait only for those running
        for t in workers:
            t.join()
        raise
    if failure:
        raise failure[0]
    report.cancelled = cancel.is_set()
    return report


class BackgroundFetcher:
    """Speculative fetches on a few threads, queued bytes bounded; full queue = dropped work."""

    def __init__(self, workers: int, max_queued_bytes: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="datahub-ahead")
        self._lock = threading.Lock()
        self._queued: set[Hashable] = set()
        self._queued_bytes = 0
        self.max_queued_bytes = max_queued_bytes
        self.submitted = 0
        self.dropped = 0
        self._closed = False

    def submit(self, key: Hashable, nbytes: int, work: Callable[[], object]) -> bool:
        with self._lock:
            if self._closed or key in self._queued:
                return False
            if self._queued_bytes + nbytes > self.max_queued_bytes:
                self.dropped += 1
                return False
            self._queued.add(key)
            self._queued_bytes += nbytes
            self.submitted += 1
        self._pool.submit(self._run, key, nbytes, work)
        return True

    def _run(self, key: Hashable, nbytes: int, work: Callable[[], object]) -> None:
        try:
            work()
        except TIER_ERRORS as exc:  # speculative: the reader fetches (and sees the error) itself
            log.debug("background fetch of %s failed: %s", key, exc)
        except Exception:  # a worker's top level: a bug is logged loudly, the worker lives on
            log.exception("background fetch of %s failed unexpectedly", key)
        finally:
            with self._lock:
                self._queued.discard(key)
                self._queued_bytes -= nbytes

    def stats(self) -> dict:
        with self._lock:
            return {"submitted": self.submitted, "dropped": self.dropped, "queued_bytes": self._queued_bytes}

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)


class HintAhead:
    """Fetch a reader's announced objects ahead of it, within a byte budget."""

    def __init__(self, warm: Callable[[ObjectRef], object], budget_bytes: int, workers: int = 4) -> None:
        self._warm = warm
        self.budget = budget_bytes
        self._cond = threading.Condition()
        self._refs: Sequence[ObjectRef] = ()
        self._next = 0  # position of the next ref to fetch
        self._ahead: deque[tuple[int, tuple[str, str], int]] = deque()  # (position, id, bytes)
        self._positions: dict[tuple[str, str], int] = {}
        self._ahead_bytes = 0
        self._generation = 0
        self._closed = False
        self.fetched = 0
        self.consumed = 0
        self._threads = [
            threading.Thread(target=self._loop, name=f"datahub-hint-{i}", daemon=True)
            for i in range(max(1, workers))
        ]
        for t in self._threads:
            t.start()

    def set(self, refs: Sequence[ObjectRef]) -> None:
        """Replace the announced order (the sequence is kept by reference, not copied)."""
        with self._cond:
            self._refs, self._next = refs, 0
            self._ahead.clear()
            self._positions.clear()
            self._ahead_bytes = 0
            self._generation += 1
            self._cond.notify_all()

    def consumed_ref(self, ref: ObjectRef) -> None:
        """A reader read ``ref``: release it and every hinted object before it."""
        with self._cond:
            pos = self._positions.get((ref.url, ref.etag))
            if pos is None:
                return
            while self._ahead and self._ahead[0][0] <= pos:
                _, oid, nbytes = self._ahead.popleft()
                self._positions.pop(oid, None)
                self._ahead_bytes -= nbytes
                self.consumed += 1
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._can_take():
                    self._cond.wait()
                if self._closed:
                    return
                pos, ref = self._next, self._refs[self._next]
                self._next += 1
                oid = (ref.url, ref.etag)
                if oid in self._positions:
                    continue
                self._ahead.append((pos, oid, ref.size))
                self._positions[oid] = pos
                self._ahead_bytes += ref.size
                generation = self._generation
            try:
                self._warm(ref)
            except TIER_ERRORS as exc:  # speculative: the reader fetches (and sees the error) itself
                log.debug("hinted fetch of %s failed: %s", ref.url, exc)
                continue
            except Exception:  # a worker's top level: a bug is logged loudly, the worker lives on
                log.exception("hinted fetch of %s failed unexpectedly", ref.url)
                continue
            with self._cond:  # several workers count here
                if generation == self._generation:
                    self.fetched += 1

    def _can_take(self) -> bool:
        if self._next >= len(self._refs):
            return False
        size = self._refs[self._next].size
        return not self._ahead or self._ahead_bytes + size <= self.budget

    def stats(self) -> dict:
        with self._cond:
            return {
                "fetched": self.fetched,
                "consumed": self.consumed,
                "ahead_bytes": self._ahead_bytes,
                "budget_bytes": self.budget,
                "remaining": max(0, len(self._refs) - self._next),
            }

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=5)
