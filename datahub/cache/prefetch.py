"""Fetching ahead of readers: warm-up (warm a set of objects), hints and readahead.

- ``run_prefetch`` warms a set of refs (``datahub prefetch``, ``mount --prefetch``, the
  CSI ``prefetch`` attribute) so that it never hurts the readers it is meant to help:

  * every origin request it makes is in class ``Priority.WARMUP``, so the origin scheduler
    serves demand reads (and hints, read-ahead) first and lets warm-up use what is left;
  * a page any tier already holds (RAM, disk, shared) is skipped without a request, so a
    rerun over a cached version issues no GET, and a rerun after an interruption resumes;
  * small objects come first, each warmed whole by one worker; an object of more than
    ``LARGE_PAGES`` pages is deferred to the end and cut into one-page ranged parts that
    many workers fetch side by side (one large file never holds up thousands of small ones);
  * with a ``WarmBudget`` it warms only what fits: each tier takes this pass's pages up to
    its low watermark, so the tier's evictor never has to drop a page this pass put there;
    once no persistent tier has room the pass stops (``budget_reached``);
  * with ``hinted`` (a reader's announced order: order hints, ``datahub.torch`` samplers)
    the hinted objects are warmed first, in that order, then the rest;
  * with ``hold`` (``datahub.cache.activity``) a large object no reader has opened or
    announced waits until the readers have been idle a while: it may never be read, and fetching it would
    compete with a running job for the node's CPU and network;
  * ``cancel`` (Ctrl-C, unmount) stops it: no new part is started, each worker finishes at
    most the page it is fetching (pages are stored whole or not at all).

  It blocks rather than drops: the caller asked for the whole set.
- ``HintAhead`` follows a reader's announced order (a training sampler's upcoming keys)
  and keeps the next objects fetched while the bytes fetched but not yet read stay within
  ``hint_budget_bytes``; a read of a hinted object releases it and everything before it.
  Its requests are in class ``Priority.HINTED``.
- ``BackgroundFetcher`` runs speculative work (readahead) on a few threads behind a queue
  bounded in bytes; when the queue is full new work is dropped, never waited for. Its
  requests are in the class it was made with (``Priority.READAHEAD``).

Every worker sets its class itself (``origin_priority`` is a contextvar, and threads do
not inherit it from the thread that started them).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from datahub.cache.pages import page_count
from datahub.cache.priority import Priority, origin_cancel, origin_priority
from datahub.cache.scheduler import OriginScheduler
from datahub.cache.tier import TIER_ERRORS, Tier
from datahub.errors import Cancelled, DatahubError
from datahub.storage.base import ObjectRef
from datahub.words import counted

log = logging.getLogger(__name__)

MAX_REPORTED_FAILURES = 100
LARGE_PAGES = 4  # an object of more pages is warmed last, as one-page ranged parts
#: at most this many large objects wait for the end of a pass, and this many hinted objects are
#: remembered: a pass over 10^8 files never holds an object per file (docs/fuse.md, "The namespace")
DEFERRED_MAX = 65536
HINT_DONE_MAX = 65536


@dataclass
class PrefetchReport:
    objects: int = 0  # refs looked at
    pages_fetched: int = 0  # pages brought in by this run
    pages_cached: int = 0  # pages found already cached (skipped: resume)
    bytes_fetched: int = 0
    failed: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)  # (url, message), first 100
    cancelled: bool = False
    budget_reached: bool = False  # the cache was full: the rest of the set was not warmed

    def as_dict(self) -> dict:
        return {
            "objects": self.objects,
            "pages_fetched": self.pages_fetched,
            "pages_cached": self.pages_cached,
            "bytes_fetched": self.bytes_fetched,
            "failed": self.failed,
            "errors": [{"url": u, "error": e} for u, e in self.errors],
            "cancelled": self.cancelled,
            "budget_reached": self.budget_reached,
        }

    def __str__(self) -> str:
        """One line for a person (the CLI, a mount's log), never the dataclass's repr."""
        mib = self.bytes_fetched / 2**20
        line = (
            f"{counted(self.objects, 'object')}: {counted(self.pages_fetched, 'page')} fetched ({mib:.1f} MiB), "
            f"{self.pages_cached} already cached, {self.failed} failed"
        )
        if self.budget_reached:
            line += "; stopped: the cache is full (the rest was not warmed)"
        if self.cancelled:
            line += "; cancelled"
        return line

    def error_lines(self) -> list[str]:
        """Each failed object and why, one a line (the first MAX_REPORTED_FAILURES)."""
        return [f"  {url}: {error}" for url, error in self.errors]


@dataclass(frozen=True)
class WarmUnit:
    """Pages ``first..last`` (inclusive) of ``ref``, to be stored in the tiers ``keep``.

    ``keep`` is None without a budget (every tier). ``part`` is true for one part of a
    large object (the object is reported once all its parts are done). ``budget`` is the
    pass's, told when a tier refuses a page (``WarmBudget.refused``). ``hinted``: a reader
    announced it, so it is never held back for idle readers. ``serial`` tells the parts of
    one occurrence of a large object from another's: a pass may meet one object version twice
    (two versions of a dataset mounted together share their unchanged files; identical files
    share one content-addressed blob), and both occurrences' parts may be in flight at once.
    """

    ref: ObjectRef
    first: int
    last: int
    keep: tuple[Tier, ...] | None = None
    part: bool = False
    budget: WarmBudget | None = None
    hinted: bool = False
    serial: int = 0


class WarmBudget:
    """How many bytes one warm-up pass may put into each tier: what fits below its low watermark.

    Why the low watermark: a tier's evictor runs from the high down to the low watermark,
    and an admission policy replaces victims above the high one; a pass that stays below
    the low watermark with its own pages never makes the tier evict one of them, whatever
    the policy. Pages found already cached count too (they are part of what the version
    occupies), so a rerun over a version larger than the cache stops where the first pass
    did instead of pushing out its first half. The tiers that ``keep`` pages are the
    persistent ones (RAM only when there is none): when none of them has room the pass
    stops. RAM takes pages while it has room and is skipped after, so warm-up never churns it.

    A tier that refuses a page (its admission filter prefers what it holds, e.g. a disk
    full of another version's popular pages) counts as full from then on: warm-up never
    pushes out what readers use, and does not keep fetching pages nobody will keep.
    """

    def __init__(self, tiers: Sequence[Tier]) -> None:
        self._lock = threading.Lock()
        self.room: dict[Tier, int] = {}
        for tier in tiers:
            limit = tier.usage().limit
            if limit > 0:
                self.room[tier] = int(limit * tier.low)
        persistent = [t for t in self.room if t.persistent]
        self.keeping = frozenset(persistent or self.room)
        self.used: dict[Tier, int] = dict.fromkeys(self.room, 0)

    def capacity(self) -> int:
        """The most bytes one pass may warm: the largest room of a tier that keeps pages."""
        return max((self.room[t] for t in self.keeping), default=0)

    def refused(self, tier: Tier) -> None:
        """``tier`` refused a page of this pass: it takes no more of it."""
        with self._lock:
            if tier in self.used:
                self.used[tier] = self.room[tier] + 1

    def reserve(self, nbytes: int) -> tuple[Tier, ...] | None:
        """The tiers that take ``nbytes`` more of this pass (counted now), or None: full."""
        with self._lock:
            chosen = tuple(t for t in self.room if self.used[t] + nbytes <= self.room[t])
            if not any(t in self.keeping for t in chosen):
                return None
            for t in chosen:
                self.used[t] += nbytes
            return chosen


class WarmOrder:
    """The units of a warm-up pass, in the order they should be fetched (not thread-safe).

    Hinted objects first, then the refs small ones first (as given), then the large ones
    deferred, each cut into one-page parts. A new hint (its generation changed) is taken up
    at once; hinted objects are remembered so the refs do not warm (or count) them twice.

    Bounded: past DEFERRED_MAX deferred large objects, the oldest is warmed at once, and only
    the last HINT_DONE_MAX hinted objects are remembered (an older one met again in the refs
    is skipped by the cache as already held, at the cost of an index look-up and a count).
    """

    def __init__(
        self,
        refs: Iterable[ObjectRef],
        page_size: int | None,
        hinted: Callable[[], tuple[int, Sequence[ObjectRef]]] | None = None,
    ) -> None:
        self._source: Iterator[ObjectRef] = iter(refs)
        self._page_size = page_size
        self._hinted = hinted
        self._hint_generation = -1
        self._hint_refs: Sequence[ObjectRef] = ()
        self._hint_next = 0
        self._hint_done: dict[tuple[str, str], None] = {}  # insertion order: the oldest first
        self._large: deque[ObjectRef] = deque()
        self._parts: deque[WarmUnit] = deque()
        self._source_done = False

    def next(self) -> tuple[ObjectRef, list[WarmUnit]] | None:
        """The next object and its units (several for a large one), or None when done.

        Raises whatever the refs iterator raises.
        """
        ref = self._next_hinted()
        if ref is not None:
            return ref, [replace(u, hinted=True) for u in self._units(ref)]
        while not self._source_done:
            try:
                ref = next(self._source)
            except StopIteration:
                self._source_done = True
                break
            if self._hint_done and (ref.url, ref.etag) in self._hint_done:
                continue  # warmed (and counted) in the hinted order already
            if self._is_large(ref):
                self._large.append(ref)
                if len(self._large) <= DEFERRED_MAX:
                    continue
                ref = self._large.popleft()
            return ref, self._units(ref)
        if self._large:
            ref = self._large.popleft()
            return ref, self._units(ref)
        return None

    def _next_hinted(self) -> ObjectRef | None:
        if self._hinted is None:
            return None
        generation, refs = self._hinted()
        if generation != self._hint_generation:
            self._hint_generation, self._hint_refs, self._hint_next = generation, refs, 0
        while self._hint_next < len(self._hint_refs):
            ref = self._hint_refs[self._hint_next]
            self._hint_next += 1
            oid = (ref.url, ref.etag)
            if oid not in self._hint_done:
                self._hint_done[oid] = None
                if len(self._hint_done) > HINT_DONE_MAX:
                    del self._hint_done[next(iter(self._hint_done))]  # the oldest
                return ref
        return None

    def _is_large(self, ref: ObjectRef) -> bool:
        return self._page_size is not None and page_count(ref.size, self._page_size) > LARGE_PAGES

    def _units(self, ref: ObjectRef) -> list[WarmUnit]:
        if self._page_size is None:
            return [WarmUnit(ref, 0, 0)]
        pages = page_count(ref.size, self._page_size)
        if pages <= LARGE_PAGES:
            return [WarmUnit(ref, 0, max(0, pages - 1))]
        return [WarmUnit(ref, i, i, part=True) for i in range(pages)]


def _unit_bytes(unit: WarmUnit, page_size: int | None) -> int:
    if page_size is None:
        return unit.ref.size
    start = unit.first * page_size
    return max(0, min(unit.ref.size, (unit.last + 1) * page_size) - start)


def run_prefetch(
    refs: Iterable[ObjectRef],
    warm: Callable[[WarmUnit], tuple[int, int, int]],
    *,
    concurrency: int,
    progress=None,
    cancel: threading.Event | None = None,
    page_size: int | None = None,
    budget: WarmBudget | None = None,
    hinted: Callable[[], tuple[int, Sequence[ObjectRef]]] | None = None,
    priority: Priority = Priority.WARMUP,
    hold: Callable[[ObjectRef, threading.Event], bool] | None = None,
) -> PrefetchReport:
    """Call ``warm(unit) -> (pages fetched, pages already cached, bytes fetched)`` per unit.

    ``concurrency`` worker threads each take the next unit (``WarmOrder``: hinted first,
    small objects, then large ones in one-page parts when ``page_size`` is given; else one
    unit per ref) and warm it, so at most ``concurrency`` units are in flight and a
    generator of ten million records is consumed as the work proceeds, never
    materialised. Why workers pulling from the order rather than a pool with one future
    per ref: a future, a Python-level semaphore and a queue hand-off per object cost more
    CPU than warming a small cached object's bookkeeping, and the run is CPU-bound on
    small nodes. The worker count may be large (the origin scheduler decides how many of
    their requests run at once; the others wait there). Units are reserved in ``budget``
    as they are taken, in order, so the objects warmed when the cache is full are a prefix
    of the order. An error raised by ``refs`` itself stops the run and is raised here once
    the units in flight are done. ``hold(ref, cancel)`` (``ReaderActivity.hold``) is asked
    before each part of a large object and may wait (readers busy with other objects);
    False stops the worker (cancelled).
    """
    report = PrefetchReport()
    cancel = cancel or threading.Event()
    order = WarmOrder(refs, page_size, hinted)
    pending: deque[WarmUnit] = deque()  # the remaining parts of the object being cut
    # large objects in flight (by their units' ``serial``: one object version may be listed
    # twice, and counted by URL and etag a second occurrence overwrote the first's count) ->
    # parts not done
    parts_left: dict[int, int] = {}
    serials = itertools.count(1)
    take_lock = threading.Lock()  # one taker at a time: iterators are not thread-safe
    lock = threading.Lock()  # the report
    failure: list[BaseException] = []
    failed_large: set[tuple[str, str]] = set()  # large objects a part of which failed

    def take() -> WarmUnit | None:
        with take_lock:
            if cancel.is_set() or failure or report.budget_reached:
                return None
            if not pending:
                try:
                    found = order.next()
                except BaseException as exc:  # the caller's iterator failed: stop, raise it below
                    failure.append(exc)
                    return None
                if found is None:
                    return None
                ref, units = found
                report.objects += 1
                if len(units) > 1:
                    serial = next(serials)
                    units = [replace(u, serial=serial) for u in units]
                    parts_left[serial] = len(units)
                pending.extend(units)
            unit = pending.popleft()
            if budget is not None:
                keep = budget.reserve(_unit_bytes(unit, page_size))
                if keep is None:
                    report.budget_reached = True
                    pending.clear()
                    return None
                unit = replace(unit, keep=keep, budget=budget)
            return unit

    def done(unit: WarmUnit) -> bool:
        """Whether ``unit`` finished its object (the last part of a large one)."""
        if not unit.part:
            return True
        with take_lock:
            parts_left[unit.serial] -= 1
            if parts_left[unit.serial]:
                return False
            del parts_left[unit.serial]
            return True

    def work() -> None:
        with origin_priority(priority), origin_cancel(cancel):
            while (unit := take()) is not None:
                ref = unit.ref
                if unit.part and (ref.url, ref.etag) in failed_large:
                    done(unit)  # an earlier part failed (changed, gone): the rest would too
                    continue
                if unit.part and not unit.hinted and hold is not None and not hold(ref, cancel):
                    return  # cancelled while readers kept it waiting
                try:
                    fetched, cached, nbytes = warm(unit)
                except Cancelled:
                    return  # the pass was cancelled while this worker waited for an origin slot
                except Exception as exc:  # a worker's top level: counted per ref, reported, never fatal
                    message = exc.message if isinstance(exc, DatahubError) else f"{type(exc).__name__}: {exc}"
                    if not isinstance(exc, DatahubError):
                        log.warning("prefetch of %s failed unexpectedly: %s", ref.url, message)
                    done(unit)
                    with lock:
                        first = not unit.part or (ref.url, ref.etag) not in failed_large
                        if unit.part:
                            failed_large.add((ref.url, ref.etag))  # its other parts are skipped
                        if first:  # an object counts as failed once, whatever its parts did
                            report.failed += 1
                            if len(report.errors) < MAX_REPORTED_FAILURES:
                                report.errors.append((ref.url, message))
                    continue
                finished = done(unit)
                with lock:
                    report.pages_fetched += fetched
                    report.pages_cached += cached
                    report.bytes_fetched += nbytes
                if progress is not None:
                    progress.update(1 if finished else 0, nbytes)

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
        cancel.set()  # no new units are taken; wait only for those running
        for t in workers:
            t.join()
        raise
    if failure:
        raise failure[0]
    report.cancelled = cancel.is_set()
    return report


class BackgroundFetcher:
    """Speculative fetches on a few threads, queued bytes bounded; full queue = dropped work."""

    def __init__(
        self,
        workers: int,
        max_queued_bytes: int,
        priority: Priority = Priority.READAHEAD,
        scheduler: OriginScheduler | None = None,
    ) -> None:
        """``scheduler``: each job waits for its origin slot BEFORE it runs (and claims pages), so
        a reader who wants one of those pages fetches it itself instead of waiting behind this
        job's place in the origin queue; the job's own requests reuse that slot."""
        self.priority = priority
        self.scheduler = scheduler
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
            with origin_priority(self.priority):  # set here: pool threads do not inherit it
                if self.scheduler is None:
                    work()
                else:
                    with self.scheduler.slot(nbytes, sample=False):
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
                with origin_priority(Priority.HINTED):  # a reader announced it: before read-ahead and warm-up
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
