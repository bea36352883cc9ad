"""Merge concurrent calls for one key into one: the first caller works, the rest wait.

No lock is held while the work runs; waiters get the leader's result or its exception.
``claim``/``settle`` let one worker lead several keys at once (a coalesced range read of
consecutive pages): it claims each key, does one piece of I/O, and settles every key,
so concurrent callers of any of those keys wait for that one fetch. A leader that gives a
key up without a result (a stream stopped before the page arrived) settles it with
``Abandoned``: waiters then try again themselves instead of failing.

A claim may name an ``owner`` whose work may not have started yet (a stream claims its
reader's window before the origin scheduler admits its request): each caller that waits
for the key calls ``owner.joined()`` first, so the owner can take on the waiter's priority
(``datahub.cache.scheduler.Ticket``) instead of the waiter queueing behind background work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class Owner(Protocol):
    def joined(self) -> None: ...


class Abandoned(Exception):
    """The leader of a key gave it up without a result; a waiter should fetch it itself."""


class _Call(Generic[T]):
    """One key's work in progress. ``gate`` is a plain lock held until the result is in:
    a waiter passes it (acquire, release) once it opens. Cheaper than a threading.Event
    (a Condition and two locks built in Python) on a path taken once per cold page."""

    __slots__ = ("error", "gate", "owner", "value")

    def __init__(self, owner: Owner | None = None) -> None:
        self.gate = threading.Lock()
        self.gate.acquire()
        self.value: T | None = None
        self.error: BaseException | None = None
        self.owner = owner

    def wait(self) -> None:
        with self.gate:
            pass

    def open(self) -> None:
        self.gate.release()


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[Hashable, _Call[T]] = {}
        self.merged = 0  # calls that waited for another caller's result

    def do(self, key: Hashable, work: Callable[[], T]) -> T:
        while True:
            with self._lock:
                call = self._calls.get(key)
                leader = call is None
                if leader:
                    call = self._calls[key] = _Call()
                else:
                    self.merged += 1
            if leader:
                break
            if call.owner is not None:
                call.owner.joined()
            call.wait()
            if isinstance(call.error, Abandoned):
                continue
            if call.error is not None:
                raise call.error
            return call.value  # type: ignore[return-value]
        try:
            call.value = work()
            return call.value
        except BaseException as exc:
            call.error = exc
            raise
        finally:
            with self._lock:
                del self._calls[key]
            call.open()

    def claim(self, key: Hashable, owner: Owner | None = None) -> object | None:
        """Become the leader of ``key`` if nobody is; the caller MUST ``settle`` it (finally).

        ``owner``: told of each caller that waits for the key (see the module docstring).
        """
        with self._lock:
            if key in self._calls:
                return None
            call = self._calls[key] = _Call(owner)
            return call

    def settle(
        self, key: Hashable, claim: object, value: T | None = None, error: BaseException | None = None
    ) -> None:
        """Hand a claimed key's result (or error) to its waiters and release it (once)."""
        call: _Call[T] = claim  # type: ignore[assignment]
        with self._lock:
            if self._calls.get(key) is not call:
                return  # settled already
            del self._calls[key]
            call.value, call.error = value, error
        call.open()

    def in_flight(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._calls
