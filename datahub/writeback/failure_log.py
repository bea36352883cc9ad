"""One warning for a run of the same background failure, then a reminder now and then.

Why: a background loop that retries (the journal's committer writing the deferred commits,
the flusher) fails at every try once the workspace's writer lease is lost, until the mount
is unmounted: a warning per try gave such a mount one log line a second, hours of them,
burying the first one, which says what happened and what to do (review19c). A warning at
the first failure says it; a reminder every ``remind`` seconds (with the count) says it is
still so; the end of the run is said once too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

REMIND_SECONDS = 600.0  # a still-failing loop says so again after this long


class FailureLog:
    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        remind: float = REMIND_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log, self._what, self.remind, self._clock = logger, what, remind, clock
        self._failures = 0  # of the current run; 0: not failing
        self._started = self._warned = 0.0

    @property
    def failing(self) -> bool:
        return self._failures > 0

    def failed(self, message: str) -> None:
        """One more failure: a warning if it starts a run or ``remind`` seconds passed since
        the last one; else at debug level."""
        now = self._clock()
        self._failures += 1
        if self._failures == 1:
            self._started = self._warned = now
            self._log.warning("%s: %s", self._what, message)
        elif now - self._warned >= self.remind:
            self._warned = now
            self._log.warning(
                "%s: still failing, %d tries in %.0f s (retried quietly; the first warning said why): %s",
                self._what, self._failures, now - self._started, message,
            )  # fmt: skip
        else:
            self._log.debug("%s: %s", self._what, message)

    def succeeded(self, message: str) -> None:
        """The run of failures (if any) is over: said once, with ``message``."""
        if self._failures:
            self._log.warning(
                "%s: %s (after %d failed tries in %.0f s)",
                self._what, message, self._failures, self._clock() - self._started,
            )  # fmt: skip
        self._failures = 0
