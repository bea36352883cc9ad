"""What the origin remembers of a stalled object: a genuine timeout, for a fixed time.

Why remember at all: the kernel re-asks a failed readahead at once with a synchronous read
of the same page, and a DataLoader may retry a failed sample at once. Without a memory one
``read()`` through a mount waits two budgets (``s3.total_timeout``) on a stalled origin.

Why so little: a remembered failure is an error given to a reader without asking the
origin, so it must never outlive the outage. The rules:

- Only genuine timeouts are remembered (``details["timed_out"]``, set by the storage layer
  for a connect or read that got no answer in time). Refused connections, resets and 5xx
  answers are fast failures: the retry policy already handled them, and asking again costs
  little, so a recovered origin is seen on the next read.
- A failure expires ``seconds`` after the request that timed out ended. Meeting the memory
  never renews it: the error a caller gets from the memory is marked ``remembered`` and is
  never stored again.
- A request to the same endpoint (``s3://bucket``) that began after a failure was stored
  and then succeeded proves the origin answers again: every failure of that endpoint stored
  before it began is forgotten at once.

The memory is bounded (``limit`` objects); past it, the oldest half is dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from datahub.errors import TransientStorageError

STALL_MEMORY = 5.0  # seconds a timed-out object fails at once instead of being asked again


def endpoint_of(url: str) -> str:
    """The part of an object URL that names one origin: ``s3://bucket/a/b`` -> ``s3://bucket``."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{rest.split('/', 1)[0]}" if sep else url


class StallMemory:
    def __init__(
        self, seconds: float = STALL_MEMORY, *, limit: int = 4096, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = seconds
        self.limit = limit
        self.clock = clock
        self._lock = threading.Lock()
        self._failed: dict[tuple[str, str], tuple[float, TransientStorageError]] = {}
        self._answered: dict[str, float] = {}  # endpoint -> start time of its latest successful request

    def check(self, url: str, etag: str) -> None:
        """Raise the remembered timeout of ``(url, etag)``, if it is still in force."""
        with self._lock:
            hit = self._failed.get((url, etag))
            if hit is None:
                return
            at, exc = hit
            now = self.clock()
            if now - at >= self.seconds or self._answered.get(endpoint_of(url), -1.0) > at:
                del self._failed[(url, etag)]
                return
        left = self.seconds - (now - at)
        raise TransientStorageError(
            f"{exc.message} (not asked again for {left:.1f} s more: the origin timed out "
            f"{now - at:.1f} s ago; a failure is remembered {self.seconds:g} s, or until the origin answers)",
            **{**exc.details, "remembered": True},
        )

    def failed(self, url: str, etag: str, exc: BaseException) -> None:
        """Store ``exc`` if it is a genuine timeout that came from the origin, not from the memory."""
        if not isinstance(exc, TransientStorageError):
            return
        if not exc.details.get("timed_out") or exc.details.get("remembered"):
            return
        with self._lock:
            if len(self._failed) >= self.limit:
                oldest = sorted(self._failed.items(), key=lambda item: item[1][0])[: self.limit // 2]
                for key, _ in oldest:
                    del self._failed[key]
            self._failed[(url, etag)] = (self.clock(), exc)

    def answered(self, url: str, started: float) -> None:
        """A request to ``url``'s endpoint that began at ``started`` (this clock) succeeded."""
        endpoint = endpoint_of(url)
        with self._lock:
            if not self._failed:
                return
            if started > self._answered.get(endpoint, -1.0):
                self._answered[endpoint] = started

    def __len__(self) -> int:
        with self._lock:
            return len(self._failed)
