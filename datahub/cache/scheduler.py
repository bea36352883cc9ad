"""The origin scheduler: one per process, between every reader of the object store and the store.

Why one: demand reads, order hints, read-ahead, warm-up and write-back flush all talk to the
same object store from the same process. With a fixed pool each, background work can fill
the store's queue while a reader blocked in ``read()`` waits behind it, and no pool knows
what the store can take. Here every origin request asks for a slot in its class
(``datahub.cache.priority``):

- **Priority.** Waiters are served in class order: demand, hinted, read-ahead, warm-up. A
  demand read never queues behind background work: demand reads may have up to the limit in
  flight on their own, using ``reserve`` slots above it that background classes never get
  while background fills the limit, and background waiters are admitted only when no
  higher class waits. Background work therefore yields as soon as demand arrives (its
  next request waits) and resumes once demand is served.
- **Flush on its own budget.** Write-back uploads have their own limit, so a large flush
  neither starves readers nor waits behind them.
- **Adaptive concurrency** (``AdaptiveLimit``): the in-flight limit follows measured
  latency, in the style of TCP Vegas. While the limit is what holds requests back and the
  latency stays near the lowest seen recently, it grows (fast at first, then additively);
  when latency climbs well above that base (the store is queueing) it shrinks, but never
  below the configured start (``cache.origin_concurrency``): on a loopback store, where
  latency is CPU time, it behaves as the fixed pool did. Throttling (503 SlowDown, 429) and
  timeouts halve it, at most once per round trip, down to ``minimum``.
- **Bounded memory.** Read requests in flight never hold more than ``max_bytes`` of
  expected bodies (one request always may, so a page larger than the bound still reads).

A wait in a thread under ``origin_cancel(event)`` (warm-up workers) ends with Cancelled
within ``CANCEL_POLL`` of the event being set, and sends nothing.

**Priority inheritance** (``Ticket``). Most background work takes its slot before it claims
a page in the single flight, so nobody waits on a claim whose owner is still queued. A
stream cannot: it claims its reader's window before its request is admitted (so that the
reader's next read waits for the stream instead of racing it). Its claims carry the
stream's ``Ticket``; a reader who waits on such a claim lends the stream its class. A
request of the stream that is queued moves to the end of the reader's class's queue (it is
then served as that class: in its order, within its limit and reserve, released as it); if
none is queued, the stream's next request is made in that class. Without it, a demand read
would wait behind every queued demand and hinted request and outside the demand reserve.

The store reports throttling through ``datahub.storage.retry.observe_transient``: every
transient failure of an attempt, retried or not, reaches the scheduler of the request.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from datahub.cache.priority import Priority, current_cancel, current_priority
from datahub.errors import Cancelled, TransientStorageError
from datahub.storage.retry import observe_transient

READ_CLASSES = (Priority.DEMAND, Priority.HINTED, Priority.READAHEAD, Priority.WARMUP)
CANCEL_POLL = 0.1  # seconds: how often a cancellable wait looks at its event
SAMPLE_MAX_BYTES = 1 << 20  # larger reads measure bandwidth, not latency: not sampled
TOLERANCE_GROW = 1.5  # grow while window latency <= base * this
TOLERANCE_SHRINK = 2.5  # shrink when window latency > base * this
BASE_MEMORY = 30.0  # seconds: the base latency is the lowest window mean this recent
THROTTLE_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"}
)


def is_congestion(exc: TransientStorageError) -> bool:
    """Whether a transient failure says "too much load" (throttled, or timed out), not "broken"."""
    d = exc.details
    return bool(d.get("timed_out")) or d.get("status") in (429, 503) or d.get("s3_code") in THROTTLE_CODES


class AdaptiveLimit:
    """How many requests may be in flight: grows while latency holds, shrinks when it climbs.

    Not thread-safe: the scheduler calls it under its lock. ``clock`` is a parameter so
    tests drive it without sleeping.
    """

    def __init__(
        self, initial: int, *, minimum: int, maximum: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.maximum = max(1, maximum)
        self.floor = max(1, min(initial, self.maximum))  # latency alone never goes below this
        self.minimum = max(1, min(minimum, self.floor))  # throttling may
        self.limit = float(self.floor)
        self.slow_start = True
        self.clock = clock
        self.latency: float | None = None  # mean of the last window, seconds
        self.backoffs = 0
        self._bases: deque[tuple[float, float]] = deque()  # (time, window mean), increasing means
        self._last_cut = -1e9
        self._reset_window()

    def _reset_window(self) -> None:
        self._n = 0
        self._sum = 0.0
        self._busy = False
        self._congested = False
        self._started = self.clock()

    @property
    def base(self) -> float | None:
        return self._bases[0][1] if self._bases else None

    @property
    def current(self) -> int:
        return int(self.limit)

    def sample(self, seconds: float, busy: bool) -> None:
        """One finished request: its duration, and whether the limit held something back."""
        self._n += 1
        self._sum += seconds
        self._busy = self._busy or busy
        long_enough = self.clock() - self._started >= (self.base or 0.0)
        if self._n >= max(8, self.current // 2) and long_enough:
            self._end_window()

    def congestion(self) -> None:
        """Throttled or timed out: halve, at most once per round trip (one episode, one cut)."""
        now = self.clock()
        self._congested = True
        if now - self._last_cut < max(self.latency or 0.0, 0.05):
            return
        self._last_cut = now
        self.limit = max(float(self.minimum), self.limit / 2)
        self.slow_start = False
        self.backoffs += 1

    def _end_window(self) -> None:
        now = self.clock()
        mean = self._sum / self._n
        self.latency = mean
        while self._bases and (self._bases[-1][1] >= mean or now - self._bases[0][0] > BASE_MEMORY):
            if self._bases[-1][1] >= mean:
                self._bases.pop()
            else:
                self._bases.popleft()
        self._bases.append((now, mean))
        base = self.base or mean
        if self._busy and not self._congested:
            if mean <= base * TOLERANCE_GROW:
                step = self.limit / 2 if self.slow_start else max(1.0, self.limit / 16)
                self.limit = min(float(self.maximum), self.limit + step)
            elif mean > base * TOLERANCE_SHRINK:
                self.limit = max(float(self.floor), min(self.limit, self.limit * 0.9))
                self.slow_start = False
        self._reset_window()


@dataclass
class _Waiter:
    cls: Priority  # raised by OriginScheduler.promote while it queues
    nbytes: int
    lock: threading.Lock


class Ticket:
    """The place in the origin queue of a worker that claims pages before its request is
    admitted (a stream): waiters for those claims raise it to their class (``joined``).

    ``cls`` is the class of the owner's next request: ``base`` unless a waiter of a higher
    class joined since the last one was made. Fields change under the scheduler's lock.
    """

    __slots__ = ("base", "cls", "scheduler", "waiter")

    def __init__(self, scheduler: OriginScheduler, cls: Priority) -> None:
        self.scheduler = scheduler
        self.base = cls
        self.cls = cls
        self.waiter: _Waiter | None = None  # the owner's request while it queues

    def joined(self) -> None:
        """Someone waits for a page the owner claimed: lend it the waiter's class."""
        self.scheduler.promote(self, current_priority())

    @contextlib.contextmanager
    def use(self) -> Iterator[None]:
        """The owner's origin requests inside the block queue under this ticket."""
        token = _TICKET.set(self)
        try:
            yield
        finally:
            _TICKET.reset(token)


class OriginScheduler:
    """Admission of origin requests by class, under an adaptive limit (see the module docstring)."""

    def __init__(
        self,
        initial: int = 16,
        *,
        maximum: int = 256,
        minimum: int = 2,
        max_bytes: int = 512 << 20,
        flush_initial: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reads = AdaptiveLimit(initial, minimum=minimum, maximum=maximum, clock=clock)
        self.flushes = AdaptiveLimit(flush_initial or initial, minimum=minimum, maximum=maximum, clock=clock)
        self.max_bytes = max(1, max_bytes)
        self._clock = clock
        self._lock = threading.Lock()
        self._queues: dict[Priority, deque[_Waiter]] = {c: deque() for c in Priority}
        self._in_flight: dict[Priority, int] = dict.fromkeys(Priority, 0)
        self._reads_in_flight = 0
        self._bytes_in_flight = 0
        self.admitted: dict[Priority, int] = dict.fromkeys(Priority, 0)
        self.promoted = 0  # requests raised to a waiter's class, queued or made so (priority inheritance)

    # --- admission -------------------------------------------------------------------------------
    def _reserve(self) -> int:
        return max(2, self.reads.current // 4)

    def _admissible(self, cls: Priority, nbytes: int) -> bool:
        if cls is Priority.FLUSH:
            return self._in_flight[cls] < self.flushes.current
        if self._reads_in_flight and self._bytes_in_flight + nbytes > self.max_bytes:
            return False
        if cls is Priority.DEMAND:  # up to the limit of its own, plus a reserve background never gets
            return (
                self._in_flight[cls] < self.reads.current
                and self._reads_in_flight < self.reads.current + self._reserve()
            )
        return self._reads_in_flight < self.reads.current

    def _admit(self, cls: Priority, nbytes: int) -> None:
        self._in_flight[cls] += 1
        self.admitted[cls] += 1
        if cls is not Priority.FLUSH:
            self._reads_in_flight += 1
            self._bytes_in_flight += nbytes

    def _blocked_by_higher(self, cls: Priority) -> bool:
        if cls is Priority.FLUSH:
            return False
        return any(self._queues[c] for c in READ_CLASSES if c < cls)

    def acquire(self, cls: Priority, nbytes: int, ticket: Ticket | None = None) -> tuple[Priority, bool]:
        """Wait for a slot in ``cls`` (or the higher class ``ticket`` was raised to).

        Returns the class admitted in (release in it) and whether the limit held this
        request back (it queued).
        """
        if ticket is not None and (ticket.scheduler is not self or cls is Priority.FLUSH):
            ticket = None  # another scheduler's place in the queue, or an upload: not raised
        with self._lock:
            if ticket is not None:
                if ticket.cls < cls:  # a reader joined before this request queued: made raised
                    cls = ticket.cls
                    self.promoted += 1
                ticket.cls = ticket.base  # a raise is for one request: later joins raise again
            if not self._queues[cls] and not self._blocked_by_higher(cls) and self._admissible(cls, nbytes):
                self._admit(cls, nbytes)
                limit = self.flushes if cls is Priority.FLUSH else self.reads
                in_flight = self._in_flight[cls] if cls is Priority.FLUSH else self._reads_in_flight
                return cls, in_flight >= limit.current
            waiter = _Waiter(cls, nbytes, threading.Lock())
            waiter.lock.acquire()
            self._queues[cls].append(waiter)
            if ticket is not None:
                ticket.waiter = waiter
        try:
            self._wait(waiter)
        finally:
            if ticket is not None:
                with self._lock:
                    ticket.waiter = None
        return waiter.cls, True  # its class is final once admitted (promote moves queued waiters only)

    def _wait(self, waiter: _Waiter) -> None:
        cancel = current_cancel()
        if cancel is None:
            waiter.lock.acquire()  # released by _dispatch once admitted (accounting done there)
            return
        while not waiter.lock.acquire(timeout=CANCEL_POLL):
            if cancel.is_set():
                self._withdraw(waiter)
        if cancel.is_set():  # admitted as it was cancelled: hand the slot on
            self.release(waiter.cls, waiter.nbytes)
            raise Cancelled("origin request cancelled while it waited for a slot (warm-up stopped)")

    def promote(self, ticket: Ticket, cls: Priority) -> None:
        """Raise ``ticket``'s request to ``cls`` (priority inheritance, see the module docstring).

        A queued request moves to the end of ``cls``'s queue, as if it had been made in that
        class now; otherwise the owner's next request is made in it. A running request is
        left alone: its owner is working, nobody waits behind its place in the queue.
        """
        if cls is Priority.FLUSH:
            return
        with self._lock:
            waiter = ticket.waiter
            if waiter is not None:
                if waiter.cls <= cls:
                    return
                try:
                    self._queues[waiter.cls].remove(waiter)
                except ValueError:
                    pass  # admitted meanwhile: it runs; the raise is for the next one
                else:
                    waiter.cls = cls
                    self._queues[cls].append(waiter)
                    self.promoted += 1
                    self._dispatch()
                    return
            ticket.cls = min(ticket.cls, cls)

    def _withdraw(self, waiter: _Waiter) -> None:
        """Take a cancelled waiter out of its queue; if it was admitted meanwhile, leave it to the caller."""
        with self._lock:
            try:
                self._queues[waiter.cls].remove(waiter)
            except ValueError:
                return  # admitted: its lock is released, the caller's loop ends
        raise Cancelled("origin request cancelled while it waited for a slot (warm-up stopped)")

    def release(self, cls: Priority, nbytes: int) -> None:
        with self._lock:
            self._in_flight[cls] -= 1
            if cls is not Priority.FLUSH:
                self._reads_in_flight -= 1
                self._bytes_in_flight -= nbytes
            self._dispatch()

    def _dispatch(self) -> None:
        for cls in READ_CLASSES:  # strict priority: a waiting class stops the ones below it
            queue = self._queues[cls]
            while queue and self._admissible(cls, queue[0].nbytes):
                waiter = queue.popleft()
                self._admit(cls, waiter.nbytes)
                waiter.lock.release()
            if queue:
                break
        queue = self._queues[Priority.FLUSH]
        while queue and self._admissible(Priority.FLUSH, 0):
            waiter = queue.popleft()
            self._admit(Priority.FLUSH, 0)
            waiter.lock.release()

    # --- the one way callers use it --------------------------------------------------------------
    @contextlib.contextmanager
    def slot(self, nbytes: int = 0, *, cls: Priority | None = None, sample: bool = True) -> Iterator[None]:
        """Hold one origin slot for the block, in the caller's class (``origin_priority``).

        ``nbytes`` is the expected body (the memory bound); ``sample=False`` for blocks whose
        duration is not one request's latency (a stream held open at the consumer's pace, or
        a caller that takes its slot before it knows whether it will send anything).

        Re-entrant: inside a block of the same scheduler, a nested ``slot`` takes no second
        slot; it only times its request. Why: warm-up takes its slot before it joins a page's
        single flight, so a reader who merges into that fetch never waits behind warm-up's
        place in the queue, and a cancelled warm-up never hands its followers an error.
        """
        held = _HELD.get()
        if held is not None and held[0] is self:
            yield from self._timed(held[1], held[2], nbytes, sample)
            return
        cls = current_priority() if cls is None else cls
        nbytes = 0 if cls is Priority.FLUSH else nbytes
        cls, busy = self.acquire(cls, nbytes, _TICKET.get())
        token = _HELD.set((self, cls, busy))
        try:
            yield from self._timed(cls, busy, nbytes, sample)
        finally:
            _HELD.reset(token)
            self.release(cls, nbytes)

    def _timed(self, cls: Priority, busy: bool, nbytes: int, sample: bool) -> Iterator[None]:
        """Run the block with throttling observed; sample its duration if it is a latency."""
        limit = self.flushes if cls is Priority.FLUSH else self.reads
        start = self._clock()
        with observe_transient(lambda exc: self._on_transient(limit, exc)):
            yield
        if sample and nbytes <= SAMPLE_MAX_BYTES:
            elapsed = self._clock() - start
            with self._lock:
                limit.sample(elapsed, busy)

    def _on_transient(self, limit: AdaptiveLimit, exc: TransientStorageError) -> None:
        if is_congestion(exc):
            with self._lock:
                limit.congestion()
                self._dispatch()

    # --- what stats and /metrics show ------------------------------------------------------------
    def stats(self) -> dict:
        with self._lock:
            return {
                "limit": self.reads.current,
                "flush_limit": self.flushes.current,
                "in_flight": {c.name.lower(): self._in_flight[c] for c in Priority},
                "queued": {c.name.lower(): len(self._queues[c]) for c in Priority},
                "admitted": {c.name.lower(): self.admitted[c] for c in Priority},
                "bytes_in_flight": self._bytes_in_flight,
                "latency_ms": _ms(self.reads.latency),
                "base_latency_ms": _ms(self.reads.base),
                "flush_latency_ms": _ms(self.flushes.latency),
                "backoffs": self.reads.backoffs + self.flushes.backoffs,
                "promoted": self.promoted,
            }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


_HELD: contextvars.ContextVar[tuple[OriginScheduler, Priority, bool] | None] = contextvars.ContextVar(
    "origin_slot_held", default=None
)
_TICKET: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar("origin_ticket", default=None)
_PROCESS: OriginScheduler | None = None
_PROCESS_LOCK = threading.Lock()


def process_scheduler(
    initial: int = 16, *, maximum: int = 256, max_bytes: int = 512 << 20
) -> OriginScheduler:
    """The process's one scheduler, made by the first caller (its settings win).

    A read cache and a write-back workspace in one process (a mount daemon) then share one
    view of the store: their requests are admitted against the same limits.
    """
    global _PROCESS
    with _PROCESS_LOCK:
        if _PROCESS is None:
            _PROCESS = OriginScheduler(initial, maximum=maximum, max_bytes=max_bytes)
        return _PROCESS


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) starts with no scheduler and a fresh lock.

    Why: the inherited scheduler counts the parent's requests in flight at the fork (their
    threads do not exist in the child, so their slots are never given back) and its locks
    may have been held by a parent thread; the child's own cache would wait on them."""
    global _PROCESS, _PROCESS_LOCK
    _PROCESS, _PROCESS_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
