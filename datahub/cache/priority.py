"""Which class of work a thread's origin requests belong to.

Every path that reads the object store goes through one origin scheduler
(``datahub.cache.scheduler``). It cannot tell a reader waiting in ``read()`` from a
warm-up worker by the call alone, so the caller says so: background workers wrap their
work in ``with origin_priority(Priority.WARMUP):`` and every request they make, however
deep in the cache, is scheduled in that class. A request made outside any such block is a
demand read: that is the safe default, since a demand read scheduled as background could
wait behind background work.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import threading
from collections.abc import Iterator


class Priority(enum.IntEnum):
    """Lower value = served first. ``FLUSH`` has its own budget (write-back uploads)."""

    DEMAND = 0  # a reader is blocked on it
    HINTED = 1  # a reader announced it will read it next (order hints, samplers)
    READAHEAD = 2  # sequential detection guessed it
    WARMUP = 3  # prefetch / warm-up of a whole version
    FLUSH = 4  # write-back uploads (own budget, never competes with reads)


_CURRENT: contextvars.ContextVar[Priority] = contextvars.ContextVar(
    "origin_priority", default=Priority.DEMAND
)


def current_priority() -> Priority:
    """The class of the origin requests this thread makes now."""
    return _CURRENT.get()


@contextlib.contextmanager
def origin_priority(cls: Priority) -> Iterator[None]:
    """Schedule the origin requests made inside the block in class ``cls``."""
    token = _CURRENT.set(cls)
    try:
        yield
    finally:
        _CURRENT.reset(token)


_CANCEL: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "origin_cancel", default=None
)


def current_cancel() -> threading.Event | None:
    """The event that cancels this thread's waits for an origin slot, if any."""
    return _CANCEL.get()


@contextlib.contextmanager
def origin_cancel(event: threading.Event) -> Iterator[None]:
    """Setting ``event`` makes a wait for an origin slot inside the block raise Cancelled.

    Why: a warm-up worker queued behind demand reads would otherwise still send its request
    once admitted, long after the pass was cancelled (Ctrl-C, unmount).
    """
    token = _CANCEL.set(event)
    try:
        yield
    finally:
        _CANCEL.reset(token)
