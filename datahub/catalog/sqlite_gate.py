"""Commits to one SQLite catalog file take turns here, before ``BEGIN IMMEDIATE``.

Why: a commit parses its (spooled) body inside its write transaction, so a 59 MB commit holds
SQLite's write lock for many seconds. A second commit waiting on SQLite's own busy handler
gave up after ``busy_timeout`` and answered 409 ``conflict`` ("the catalog stayed busy") for a
conflict its client did not cause (issue 24 item 3). Here commits queue instead and run in
turn, across the threads of a process (a lock) and across processes (``flock`` on a file next
to the catalog: ``datahub serve --workers N``, a CLI import beside a server). The queue is
bounded: past ``max_queued`` waiting commits in this process, or after ``max_wait`` seconds
in the queue, a commit is refused with ``Busy`` (503 and ``Retry-After``) without having
read a change, so the client may simply send it again.

The turn is re-entrant in a thread, so the Catalog can hold it around "read the head, then
commit on it" (a commit on the head never loses a race it did not cause) while the store's
own ``commit`` takes it again.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from datahub.errors import Busy
from datahub.procs import PerProcess

RETRY_AFTER_SECONDS = 5
_POLL_FIRST, _POLL_MAX = 0.005, 0.25  # seconds between tries of another process's flock


class _Side:
    """One process's side of a ``CommitGate``."""

    def __init__(self) -> None:
        self.turn = threading.Lock()  # the holder of the process's turn, then of the flock
        self.count = threading.Lock()
        self.queued = 0
        self.local = threading.local()  # depth of this thread's (re-entrant) turn
        self.fd: int | None = None  # the lock file, opened on the first turn


class CommitGate:
    """One writer at a time per catalog file; a bounded queue of the others."""

    def __init__(
        self,
        lock_path: str | Path,
        *,
        max_queued: int = 8,
        max_wait: float = 600.0,
        retry_after: int = RETRY_AFTER_SECONDS,
        mode: int = 0o600,
    ) -> None:
        """``mode``: the lock file's, if it creates it: the catalog file's own (everyone who may
        commit to the catalog must open it), as SQLite gives its -wal and -shm files."""
        self.lock_path = Path(lock_path)
        self.mode = mode
        self.max_queued, self.max_wait, self.retry_after = max_queued, max_wait, retry_after
        # the process's side (its lock, queue and lock file): a forked child has its own, since
        # a parent thread committing at the fork held the turn for ever there (procs.PerProcess)
        self._side: PerProcess[_Side] = PerProcess(_Side)

    @property
    def queued(self) -> int:
        """Commits of this process waiting for their turn (not counting the one writing)."""
        return self._side.get().queued

    @contextmanager
    def turn(self, what: str) -> Iterator[None]:
        """Hold the catalog's one write turn for the block; ``what`` names the commit in errors."""
        side = self._side.get()
        depth = getattr(side.local, "depth", 0)
        if depth:
            side.local.depth = depth + 1
            try:
                yield
            finally:
                side.local.depth -= 1
            return
        self._acquire(side, what)
        side.local.depth = 1
        try:
            yield
        finally:
            side.local.depth = 0
            self._release(side)

    # --- inside ----------------------------------------------------------------------------------
    def _acquire(self, side: _Side, what: str) -> None:
        with side.count:
            if side.queued >= self.max_queued:
                raise self._busy(what, f"{side.queued} other commits are already waiting for it")
            side.queued += 1
        try:
            deadline = time.monotonic() + self.max_wait
            if not side.turn.acquire(timeout=self.max_wait):
                raise self._busy(what, f"it stayed busy for {self.max_wait:.0f} s")
            try:
                self._lock_file(side, what, deadline)
            except BaseException:
                side.turn.release()
                raise
        finally:
            with side.count:
                side.queued -= 1

    def _lock_file(self, side: _Side, what: str, deadline: float) -> None:
        """The flock another process may hold; polled, so the wait is bounded (a blocking flock
        cannot time out)."""
        fd = self._file(side)
        pause = _POLL_FIRST
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            if time.monotonic() + pause > deadline:
                raise self._busy(what, f"another process kept it for {self.max_wait:.0f} s")
            time.sleep(pause)
            pause = min(pause * 2, _POLL_MAX)

    def _file(self, side: _Side) -> int:
        """The lock file, opened once per process (a forked worker opens its own: a shared open
        file would share the lock)."""
        if side.fd is None:
            self.lock_path.parent.mkdir(parents=True, exist_ok=True)
            side.fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, self.mode)
        return side.fd

    def _release(self, side: _Side) -> None:
        try:
            if side.fd is not None:
                fcntl.flock(side.fd, fcntl.LOCK_UN)
        finally:
            side.turn.release()

    def _busy(self, what: str, why: str) -> Busy:
        return Busy(
            f"{what}: the catalog is busy with other commits ({why}); nothing was written, "
            f"retry in {self.retry_after} s",
            retry_after=self.retry_after,
        )

    def close(self) -> None:
        """Close this process's lock file (a parent's, in a forked child, is left alone)."""
        side = self._side.current()
        if side is not None and side.fd is not None:
            os.close(side.fd)
            side.fd = None
