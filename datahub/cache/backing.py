"""Backing files for FUSE passthrough: a one-page object's disk-tier file, verified first.

A passthrough open hands the kernel a file descriptor, and the kernel then serves every
read and mmap of that handle from the file without asking the daemon: the daemon never
sees those bytes again, so it must check them before it hands the file over (promise 2:
no reader ever sees bytes that fail their checksum).

The first open of a page file reads it whole and checks it against the checksum in its
header (``datahub.cache.disk``, format 3), then remembers the file's identity and state
``(dev, ino, size, ctime_ns, mtime_ns)``, its mtime set in the past first if it was recent
(``datahub.cache.pagefile.settled_stat``). Every later open compares an ``fstat`` of the
descriptor it is about to hand over with that record: any write, truncation, chmod or
replacement of the file moves its mtime, its ctime or its inode (a write's mtime differs from
the past one even where timestamps are coarse), and the file is then checked again. A file that
fails is removed from the tier (counted as corrupt) and the open takes the ordinary path,
which fetches the page again. A record that claims another size than the file's header is
no reason to remove it when the header names this very page (the object's URL and etag): the
record is what disagrees, and its open takes the ordinary path, whose read fails with
ObjectChanged. A header naming another page is damage, whatever size it claims. The kernel
keeps the inode of a file it was given, so an evicted or replaced file stays valid for the
handles that hold it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from datahub.cache import pages as fmt
from datahub.cache.pagefile import FileState, file_state, settled_stat
from datahub.cache.pages import PageKey

log = logging.getLogger(__name__)

MAX_REMEMBERED = 1 << 17  # verified files remembered (about 250 bytes each)

#: what :meth:`BackingFiles.open` returns with ``verify=False`` for a file it would have to read
UNVERIFIED = -1
#: what ``TieredCache.backing_fd(verify=False)`` returns for a one-page object the disk tier
#: does not hold: ``fetch=True`` would read it in, and then it has a backing file
ABSENT = -2


class BackingFiles:
    """Verified, unchanged page files of one disk tier, as descriptors for passthrough."""

    def __init__(self, disk, *, remember: int = MAX_REMEMBERED) -> None:  # disk: DiskTier
        self.disk = disk
        self._remember_max = remember
        self._lock = threading.Lock()
        self._verified: OrderedDict[str, FileState] = OrderedDict()
        self.verifications = 0  # full checks (first opens, and files changed since)
        self.rejected = 0  # files that failed a check (removed; the open took the normal path)
        #: told (st_dev, st_ino) of each page file the tier evicts (a mount retracts it)
        self.listeners: list[Callable[[int, int], None]] = []
        disk.on_written = self.written
        disk.on_discarded = self.discarded

    def written(self, key: PageKey, state: FileState) -> None:
        """The disk tier wrote this file from bytes it had just checksummed: it counts as
        verified in the state it was left in (a cold file's first passthrough open then
        reads nothing back). Any later change moves its ctime or mtime, as for a verified file."""
        self._remember(key.digest, state)

    def discarded(self, st: os.stat_result) -> None:
        for listener in list(self.listeners):
            try:
                listener(st.st_dev, st.st_ino)
            except Exception:  # a mount that is going away must not stop an eviction
                log.exception("backing file listener failed")

    def _remember(self, digest: str, state: FileState) -> None:
        with self._lock:
            self._verified[digest] = state
            self._verified.move_to_end(digest)
            while len(self._verified) > self._remember_max:
                self._verified.popitem(last=False)

    def open(self, key: PageKey, size: int, *, verify: bool = True) -> int | None:
        """A read-only descriptor of the page file holding exactly ``size`` verified bytes
        of ``key`` (the caller closes it), or None: absent, not format 3, or damaged.

        ``verify=False``: only a file verified before and unchanged since (a few metadata
        syscalls, no data read: the FUSE loop may call it inline); :data:`UNVERIFIED` if
        the file would have to be read and checked first."""
        got = self.disk.open_backing(key)
        if got is None:
            return None
        fd, header = got
        if header.size != size and header.name == key.name:
            # The record claims another length than the file holds: not this record's file.
            # The header names this very page (the object's URL and etag), so it is the
            # record that disagrees with the object, not a damaged file: it stays,
            # uncounted, for the object's own records (the ordinary read then fails with
            # ObjectChanged). A header naming another page is damage (a file renamed over
            # this one's name): the check below rejects and removes it.
            os.close(fd)
            return None
        try:
            st = os.fstat(fd)
            state = file_state(st)
            digest = key.digest
            with self._lock:
                known = self._verified.get(digest)
            if known == state and st.st_size == size:
                return _keep(fd)
            if not verify:
                os.close(fd)
                return UNVERIFIED
            state = file_state(settled_stat(fd))  # a recent file: any write from now on shows
            problem = self._check(fd, key, header, size)
            if problem is None:
                if file_state(os.fstat(fd)) != state:  # changed while it was being read: not this time
                    return _close(fd)
                self._remember(digest, state)
                return _keep(fd)
            with self._lock:
                self._verified.pop(digest, None)
                self.rejected += 1
            self.disk.corrupt(key, f"backing file: {problem}")
            return _close(fd)
        except OSError as exc:
            log.warning("backing file of %s: %s; reading through the daemon", key.url, exc)
            return _close(fd)
        except BaseException:
            os.close(fd)
            raise

    def unchanged(self, key: PageKey, fd: int) -> bool:
        """Whether ``fd`` is the file verified for ``key``, in the state it was verified in
        (one ``fstat``, no data read: the FUSE loop asks it inline, after the C table took
        its own ``fstat`` of a file just published; a change before that one moved the
        ctime, so a match now means the table's reference is the verified state)."""
        try:
            st = os.fstat(fd)
        except OSError:
            return False
        with self._lock:
            known = self._verified.get(key.digest)
        return known == file_state(st)

    def check_held(self, key: PageKey, size: int, fd: int) -> bool:
        """Whether ``fd``, a file handed out by :meth:`open` that has changed since (evicted,
        chmod, written), still holds exactly ``size`` verified bytes of ``key``: read whole
        and checked against the header it carries. Never removes anything: the tier's file
        of that name may be another, newer one."""
        try:
            head = os.getxattr(fd, fmt.XATTR)
            header = fmt.parse_header(head)
            if header is None:
                return False
            problem = self._check(fd, key, header, size)
        except OSError as exc:
            log.warning("backing file of %s: %s; reading through the daemon", key.url, exc)
            return False
        if problem is not None:
            with self._lock:
                self.rejected += 1
            log.warning(
                "backing file of %s held by open handles: %s; reading through the daemon", key.url, problem
            )
        return problem is None

    def _check(self, fd: int, key: PageKey, header: fmt.PageHeader, size: int) -> str | None:
        self.verifications += 1
        if header.size != size:
            return f"holds {header.size} bytes, the object has {size}"
        data = os.pread(fd, size + 1, 0)  # one more: a longer file would show its tail
        return fmt.check_page(key, header, data)

    def forget(self) -> None:
        with self._lock:
            self._verified.clear()


def _keep(fd: int) -> int:
    return fd


def _close(fd: int) -> None:
    os.close(fd)
    return None
