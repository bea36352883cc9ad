"""A workspace's writer lease, held in the catalog for as long as the workspace is open.

Why: the ``flock`` of ``owner.py`` keeps one writer per journal directory, i.e. per node.
Two nodes sharing one catalog and one objects bucket could both open a workspace and each
flush its own copy over the other's (docs/writeback.md, "One writer"). The lease is taken
from whatever the caller passes as ``port`` (the catalog store: ``datahub.workspaces`` and
the mount pass it; this package never imports the catalog), renewed by a thread
``ttl / 3`` seconds after its last renewal began (``ttl / 15`` after a failed one:
``next_wait``), and released at close.

Fencing: a holder that could not renew for ``ttl - margin`` seconds (measured on its own
clock since boot (``since_boot``: it runs on while the machine is suspended, which
``time.monotonic`` does not) from the *start* of its last successful renewal, so never later
than the lease's true expiry), or whose renewal was refused (another holder has it, or a server
refused its token: the writer role on the commit target was revoked), stops for good:
``check`` raises StorageError (EIO to a FUSE caller) for every journal commit (close, fsync,
namespace operations) and every origin upload or delete. A lapsed holder never pushes over a
new holder's files; what it had not flushed stays in its journal, and the next open on that
node is refused until the other holder lets go.

The owner id is random, made once per journal directory (``lease-owner``, owner-only): a
process reopening the same journal after a crash (the flock says it is the only one) takes
the lease back at once instead of waiting for it to lapse; another node's journal has
another id.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from datahub.errors import AccessDenied, Conflict, DatahubError, StorageError, Unauthenticated

log = logging.getLogger(__name__)


def since_boot() -> float:
    """Seconds on ``CLOCK_BOOTTIME``. Why not ``time.monotonic``: it stops while the machine is
    suspended, and a node resumed after longer than its lease's ttl took its lease for still
    held while the catalog's clock (which ran on) had let another node take it: two writers
    until its next renewal (review18c)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


LEASE_TTL = 30.0  # seconds a lease lasts unless renewed


class HeldLease(Protocol):
    epoch: int


class LeasePort(Protocol):
    """Where leases live: ``datahub.catalog.store.CatalogStore`` has these three."""

    def acquire_lease(
        self, name: str, owner: str, holder: str, ttl: float, dataset: str = ""
    ) -> HeldLease: ...

    def renew_lease(self, name: str, owner: str, epoch: int, ttl: float) -> HeldLease: ...

    def release_lease(self, name: str, owner: str, epoch: int) -> None: ...


class WriterLease:
    """Takes ``name``'s lease (Conflict naming the holder if another has it) and keeps it.

    ``dataset``: the workspace's commit target (``commitTo``; "": none, or the one its lease
    already names). The catalog keeps it in the lease, and a server lets only a caller who may
    write it take the lease (docs/writeback.md, "One writer per workspace")."""

    def __init__(
        self,
        port: LeasePort,
        name: str,
        what: str,
        journal_dir: Path,
        *,
        ttl: float = LEASE_TTL,
        clock: Callable[[], float] | None = None,
        dataset: str = "",
    ) -> None:
        self.name, self.what, self.ttl = name, what, ttl
        self.margin = ttl / 6  # room for the nodes' clocks and the renewal's own round trip
        self._port, self._clock = port, clock or since_boot
        self.owner = _owner_id(journal_dir)
        holder = f"host {socket.gethostname()} pid {os.getpid()}"
        started = self._clock()
        self.epoch = port.acquire_lease(name, self.owner, holder, ttl, dataset).epoch
        self._renewed_at = started
        self.longest_gap = 0.0  # the longest time between two successful renewals' starts, seen
        self._failed = False  # the last renewal failed (not refused): retry soon, not in ttl / 3
        self._lost: str | None = None
        self._still_ours = False  # lost, but ours to release: the server refused this token's role
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name=f"lease-{name}", daemon=True)
        self._thread.start()

    def check(self, doing: str) -> None:
        """StorageError once the lease may be another holder's: nothing more is acknowledged."""
        if self._lost is None:
            self._expired()
        if self._lost is not None:
            raise StorageError(
                f"{doing} refused: this process no longer holds the writer lease of {self.what} "
                f"({self._lost}), so another node may be writing it; nothing more is acknowledged "
                "or flushed here: unmount, and reopen once the other holder is gone",
                workspace=self.name,
            )

    def renew(self) -> bool:
        """One renewal (the thread's step); False once the lease is lost for good."""
        if self._lost is not None or self._expired():
            return False
        started = self._clock()
        try:
            self._port.renew_lease(self.name, self.owner, self.epoch, self.ttl)
        except (Conflict, AccessDenied, Unauthenticated) as exc:
            # taken over; or this token may write it no more (403), or is no token any more (401:
            # revoked or expired, review17b): writing on for the rest of the ttl would be a writer
            # the catalog no longer admits
            self._lost = exc.message
            self._still_ours = not isinstance(exc, Conflict)
            log.error("%s: %s", self.what, exc.message)
            return False
        except Exception as exc:  # any failure is a missed renewal: the fence counts the time
            self._failed = True
            left = self.ttl - self.margin - (self._clock() - self._renewed_at)
            log.warning(
                "%s: renewing the writer lease failed (%s); retrying, writes stop in %.0f s",
                self.what,
                exc,
                left,
            )
            return True
        self._failed = False
        gap = started - self._renewed_at
        if gap > self.ttl / 2:  # on time is ttl / 3; an operator sees a node near its fence
            log.warning(
                "%s: the writer lease was renewed %.1f s after its last renewal began (it fences "
                "past %.0f s): this node or its catalog is too busy to renew on time",
                self.what,
                gap,
                self.ttl - self.margin,
            )
        self.longest_gap = max(self.longest_gap, gap)
        self._renewed_at = started
        return True

    def _expired(self) -> bool:
        idle = self._clock() - self._renewed_at
        if idle <= self.ttl - self.margin:
            return False
        self._lost = f"not renewed for {idle:.0f} s, longer than its {self.ttl:g} s ttl allows"
        log.error("%s: the writer lease was %s: fenced", self.what, self._lost)
        return True

    def next_wait(self) -> float:
        """Seconds until the next renewal: ``ttl / 3`` after the *start* of the last successful
        one, or ``ttl / 15`` after a failed one. Why not ``ttl / 3`` after the last attempt ended
        (flaky21): a renewal that took a few seconds (the catalog's write lock held by a long
        commit, a loaded node's thread waiting for a core) and one failure then sat the holder
        idle past ``ttl - margin``, and a healthy busy node fenced itself with the catalog
        up again all along: now every renewal a fence window allows is tried."""
        if self._failed:
            return self.ttl / 15
        due = self._renewed_at + self.ttl / 3 - self._clock()
        return min(max(due, 0.0), self.ttl / 3)

    def _keep(self) -> None:
        while not self._stop.wait(self.next_wait()) and self.renew():
            pass

    def release(self) -> None:
        """Stop renewing and free the lease (unless lost to another holder or to time: then it
        is not ours to free; one refused for this token's role still is, and freeing it lets the
        target's writers take it at once)."""
        self._stop.set()
        self._thread.join()
        if self._lost is not None and not self._still_ours:
            return
        try:
            self._port.release_lease(self.name, self.owner, self.epoch)
        except DatahubError as exc:  # it lapses by itself within the ttl
            log.warning(
                "%s: releasing the writer lease failed (%s); it lapses in %g s", self.what, exc, self.ttl
            )


def _owner_id(journal_dir: Path) -> str:
    """This journal's lease owner id, made at its first lease (the caller holds the flock)."""
    path = journal_dir / "lease-owner"
    try:
        found = path.read_text().strip()
    except FileNotFoundError:
        found = ""
    if found:
        return found
    owner = uuid.uuid4().hex
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, owner.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return owner
