"""Which READs of a read-only mount pyfuse3's C threads answer from page files (the
default read mode): the Python side of pyfuse3's fastread table (fastread.h).

With zero-message opens the kernel opens files itself, keeps their page cache and sends no
OPEN or RELEASE, so a warm file costs the daemon nothing (the passthrough mode it replaces
cost an OPEN and a RELEASE per open, half a warm epoch). What reaches the daemon is a READ
when the kernel no longer holds the pages (an SSD-tier hit). The first READ of a file whose
object is wholly in the disk tier comes here: the mount verifies its page file (the
object's bytes from offset 0; docs/cache.md "Backing files") and *publishes* it; from then
on pyfuse3's C threads answer READs of that inode with a pread of the file, as long as it
fstat()s as it did when published (checked before and after each pread), and drop the
file's pages after the reply, so each byte sits in RAM once (the FUSE inode's page cache).
A changed file is retracted in C and its READ comes here again (promise 2).

This module keeps only the policy: the bound (``max_files`` descriptors; the least recently
published is retracted first), retraction on eviction, the counters. No pyfuse3 here: the
shim passes in the table (:class:`Table`), so this runs in plain unit tests. All methods
run on the FUSE loop's thread, except :meth:`FastReads.drain_hits` and
:meth:`FastReads.stats` (the C table has its own lock).
"""

from __future__ import annotations

import errno
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

MAX_FILES = 4096


class Table(Protocol):
    """pyfuse3's C table of published page files (third_party/pyfuse3, fastread.h)."""

    def publish(self, ino: int, fd: int) -> None: ...
    def retract(self, ino: int) -> bool: ...
    def retract_file(self, st_dev: int, st_ino: int) -> int: ...
    def drain_hits(self) -> list[int]: ...
    def sweep(self, slots: int) -> list[int]: ...
    def stats(self) -> dict: ...


class FastReads:
    """Per-mount policy over the C table: what to publish, the bound, eviction, counters."""

    def __init__(
        self, table: Table, *, wanted: bool, off: str = "--no-fastread", max_files: int = MAX_FILES
    ) -> None:
        self.table = table
        self.max_files = max_files
        #: "on", or why not ("off: --no-fastread", "off: FUSE passthrough", ...)
        self.mode = "on" if wanted else f"off: {off}"
        self._published: OrderedDict[int, None] = OrderedDict()  # least recently published first
        self.refused = 0

    @property
    def active(self) -> bool:
        return self.mode == "on"

    def disable(self, why: str) -> None:
        """Publish nothing more (logged once if it was on)."""
        if self.active:
            log.warning("READs in C off for this mount (%s): READs go through the daemon", why)
        self.mode = f"off: {why}"

    def may_publish(self, ino: int) -> bool:
        """Whether a READ of ``ino`` that reached Python may look for its page file (then
        :meth:`publish`). A READ of a published inode reaches Python when C found its file
        changed (and retracted it there) or could not read it: it is retracted here too and
        checked again, so a file fetched anew is published again."""
        if not self.active:
            return False
        if ino in self._published:
            self.retract(ino)
        return True

    def publish(self, ino: int, fd: int | None, still_verified: Callable[[], bool]) -> bool:
        """Publish the verified file ``fd`` of ``ino`` (owned by the table after, closed here
        otherwise); True if published. ``still_verified()`` is asked after the table took
        its fstat of ``fd`` (the reference every later READ is compared with): whether the
        file is still in the state it was verified in, so a change in between is never
        taken for the verified state."""
        if fd is None or fd < 0:
            return False
        owned = False
        try:
            if not self.active or ino in self._published:
                return False
            while len(self._published) >= self.max_files:
                old, _ = self._published.popitem(last=False)
                self.table.retract(old)
            try:
                self.table.publish(ino, fd)
            except OSError as exc:
                self.refused += 1
                if exc.errno not in (errno.ENOSPC, errno.EEXIST):
                    log.warning("READs in C: page file of inode %d refused: %s", ino, exc)
                return False
            owned = True
            self._published[ino] = None
            if not still_verified():
                log.warning("READs in C: page file of inode %d changed while published; not used", ino)
                self.retract(ino)
                return False
            return True
        finally:
            if not owned:
                os.close(fd)

    def published_inodes(self) -> list[int]:
        """The inodes published, least recently first (a copy: any thread may iterate it)."""
        return list(self._published)

    def retract(self, ino: int) -> None:
        """No more READs of ``ino`` answered in C (its descriptor closes with its last reader)."""
        self._published.pop(ino, None)
        self.table.retract(ino)

    def evicted(self, st_dev: int, st_ino: int) -> None:
        """The tier removed this file: retract it for every inode it is published for (its
        space comes back once the last descriptor closes). One page file backs several
        inodes when they name one object (a record kept by two versions, a blob of two
        keys), and the C table's ``retract_file`` retracts one entry per call: asked until
        it finds none. A file another process changed or removed is seen by C at its next
        READ, or by :meth:`sweep`."""
        seen: set[int] = set()
        while (ino := self.table.retract_file(st_dev, st_ino)) and ino not in seen:
            seen.add(ino)  # (each call removes the entry it reports: no inode comes twice)
            self._published.pop(ino, None)

    def sweep(self, slots: int) -> int:
        """Retract the published page files another process removed (evicted) or changed:
        a warm file sends no READ that would find them, so its descriptor and the removed
        file's space were held until unmount. C fstat()s ``slots`` slots of its table per
        call, going round it. How many."""
        if not self._published:
            return 0
        gone = self.table.sweep(slots)
        for ino in gone:
            self._published.pop(ino, None)
        return len(gone)

    def drain_hits(self) -> list[int]:
        """Inodes with READs answered in C since the last call (each once)."""
        return self.table.drain_hits() if self._published else []

    def stats(self) -> dict:
        t = self.table.stats()
        return {
            "reads_in_c": self.mode,
            "reads_answered_in_c": t.get("reads", 0),
            "read_bytes_in_c": t.get("bytes", 0),
            "reads_in_c_direct": t.get("direct", 0),
            "page_files_published": t.get("files", 0),
            "page_files_changed": t.get("changed", 0),
            "page_files_swept": t.get("swept", 0),
            "reads_handed_to_python": t.get("handed", 0),
        }
