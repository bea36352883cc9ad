"""The one place storage calls are retried: capped exponential backoff with full jitter.

Only ``TransientStorageError`` is retried (the S3 boundary raises it for throttling such
as SlowDown/429/503, other 5xx, connection errors and timeouts); every other error goes
straight to the caller. The SDK's own retry layer is switched off, so attempts are never
multiplied. ``sleep`` and ``random`` are parameters so tests check the schedule exactly.

Full jitter (delay = random() * min(cap, base * 2**n)) spreads the retries of many
clients throttled at once, instead of having them return in lock-step.

``budget`` is one deadline across all attempts and backoffs of a call (``s3.total_timeout``):
a stalled endpoint costs the caller at most the budget, whatever ``max_attempts`` and the
per-attempt timeouts are. Between attempts the budget is checked and a backoff never sleeps
past it; inside an attempt, ``remaining()`` tells the request how long it may wait
(``S3Store`` clamps its GET's connect and read timeouts to it).
"""

from __future__ import annotations

import contextlib
import contextvars
import random as _random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from datahub.errors import TransientStorageError

T = TypeVar("T")

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("storage_deadline", default=None)
_OBSERVER: contextvars.ContextVar[Callable[[TransientStorageError], None] | None] = contextvars.ContextVar(
    "storage_transient_observer", default=None
)


_GUARD: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "storage_guard", default=None
)


@contextlib.contextmanager
def guard_attempts(check: Callable[[], None]) -> Iterator[None]:
    """Run ``check`` before every attempt of a storage call made in this block (it may raise).

    Why: a retried request sends again what it read long before, when the caller may no
    longer be entitled to: the write-back flusher's upload resent after its workspace's lease
    was taken over landed the old holder's bytes over the new holder's file (review14d). The
    flusher passes its writer fence. Calls on other threads (a multipart upload's parts) do
    not see it; the requests that make an object (a single PUT, a multipart's completion) run
    on the caller's."""
    token = _GUARD.set(check)
    try:
        yield
    finally:
        _GUARD.reset(token)


@contextlib.contextmanager
def observe_transient(callback: Callable[[TransientStorageError], None]) -> Iterator[None]:
    """Call ``callback`` with every transient failure of an attempt made in this block.

    Why: a throttled attempt that a retry then rescues never reaches the caller as an
    error, yet it is the signal the origin scheduler must slow down on.
    """
    token = _OBSERVER.set(callback)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


def report_transient(exc: TransientStorageError) -> None:
    """Hand ``exc``, a failed attempt made elsewhere (a fetch worker process), to the
    ``observe_transient`` block this thread is in, as if it had been made here."""
    observer = _OBSERVER.get()
    if observer is not None:
        observer(exc)


def remaining() -> float | None:
    """Seconds left of the budget of the ``RetryPolicy.call`` running in this thread (None: no budget)."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()


@dataclass
class RetryPolicy:
    max_attempts: int = 6  # total attempts, the first one included
    base: float = 0.1  # seconds: ceiling of the first backoff
    cap: float = 20.0  # seconds: no single backoff waits longer
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    random: Callable[[], float] = field(default=_random.random, repr=False)
    budget: float | None = None  # seconds for the whole call, attempts and backoffs; None: unbounded
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def __post_init__(self) -> None:
        self.max_attempts = max(1, int(self.max_attempts))

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (0 = the first retry)."""
        return self.random() * min(self.cap, self.base * 2**retry)

    def call(
        self, fn: Callable[[], T], on_retry: Callable[[int, TransientStorageError], None] | None = None
    ) -> T:
        """Run ``fn`` until it succeeds, raises a non-transient error, or attempts or budget run out.

        After the last attempt the final TransientStorageError is raised, its message
        saying how many attempts were made (and that the budget ran out, when it did).
        """
        deadline = None if self.budget is None else self.clock() + self.budget
        token = _DEADLINE.set(None if deadline is None else time.monotonic() + self.budget)
        try:
            guard = _GUARD.get()
            for attempt in range(self.max_attempts):
                if guard is not None:
                    guard()
                try:
                    return fn()
                except TransientStorageError as exc:
                    observer = _OBSERVER.get()
                    if observer is not None:
                        observer(exc)
                    if attempt + 1 >= self.max_attempts:
                        self._give_up(exc, attempt + 1, out_of_time=False)
                        raise
                    delay = self.backoff(attempt)
                    if deadline is not None and deadline - self.clock() <= delay:  # no time to try again
                        self._give_up(exc, attempt + 1, out_of_time=True)
                        raise
                    if on_retry is not None:
                        on_retry(attempt, exc)
                    self.sleep(delay)
        finally:
            _DEADLINE.reset(token)
        raise AssertionError("unreachable")  # pragma: no cover

    def _give_up(self, exc: TransientStorageError, attempts: int, out_of_time: bool) -> None:
        exc.details["attempts"] = attempts
        if out_of_time:
            exc.details["budget"] = self.budget
            exc.message = (
                f"{exc.message} (gave up after {attempts} attempt{'s' if attempts > 1 else ''}: "
                f"the {self.budget:g} s budget (s3.total_timeout) ran out)"
            )
        elif attempts > 1:
            exc.message = f"{exc.message} (gave up after {attempts} attempts)"
        exc.args = (exc.message,)
