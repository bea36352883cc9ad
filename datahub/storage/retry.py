"""The one place storage calls are retried: capped exponential backoff with full jitter.

Only ``TransientStorageError`` is retried (the S3 boundary raises it for throttling such
as SlowDown/429/503, other 5xx, connection errors and timeouts); every other error goes
straight to the caller. The SDK's own retry layer is switched off, so attempts are never
multiplied. ``sleep`` and ``random`` are parameters so tests check the schedule exactly.

Full jitter (delay = random() * min(cap, base * 2**n)) spreads the retries of many
clients throttled at once, instead of having them return in lock-step.
"""

from __future__ import annotations

import random as _random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from datahub.errors import TransientStorageError

T = TypeVar("T")


@dataclass
class RetryPolicy:
    max_attempts: int = 6  # total attempts, the first one included
    base: float = 0.1  # seconds: ceiling of the first backoff
    cap: float = 20.0  # seconds: no single backoff waits longer
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    random: Callable[[], float] = field(default=_random.random, repr=False)

    def __post_init__(self) -> None:
        self.max_attempts = max(1, int(self.max_attempts))

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (0 = the first retry)."""
        return self.random() * min(self.cap, self.base * 2**retry)

    def call(
        self, fn: Callable[[], T], on_retry: Callable[[int, TransientStorageError], None] | None = None
    ) -> T:
        """Run ``fn`` until it succeeds, raises a non-transient error, or attempts run out.

        After the last attempt the final TransientStorageError is raised, its message
        saying how many attempts were made.
        """
        for attempt in range(self.max_attempts):
            try:
                return fn()
            except TransientStorageError as exc:
                if attempt + 1 >= self.max_attempts:
                    exc.details["attempts"] = self.max_attempts
                    if self.max_attempts > 1:
                        exc.message = f"{exc.message} (gave up after {self.max_attempts} attempts)"
                        exc.args = (exc.message,)
                    raise
                if on_retry is not None:
                    on_retry(attempt, exc)
                self.sleep(self.backoff(attempt))
        raise AssertionError("unreachable")  # pragma: no cover
