"""Which opens of a read-only mount the kernel serves itself (FUSE passthrough), and the
backing ids they hold.

At OPEN of a file whose object is wholly in the disk tier, the mount registers the
verified page file as a backing file (``FUSE_DEV_IOC_BACKING_OPEN``) and answers with its
backing id: the kernel then serves read and mmap of that handle from the file and never
asks the daemon. Everything else is answered as before (reads through the daemon).

The kernel's rules shape the bookkeeping (fs/fuse/iomode.c): while an inode has a
passthrough handle open, every open of it must name the same backing file; and a
passthrough open fails (EIO to the caller) while the inode has an ordinary (cached)
handle open. So each inode is in one of three states: no handle, ordinary handles only,
or passthrough handles sharing one backing id; the id is released with the last of them.
Backing ids are bounded (``max_ids`` inodes at once; more opens take the ordinary path).

No pyfuse3 here: the shim passes in the two ioctls, so this runs in plain unit tests.
All methods run on the FUSE loop's thread (no lock needed).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

MAX_BACKING_IDS = 4096

#: errors that mean "this mount cannot use passthrough at all": no CAP_SYS_ADMIN, the
#: tier's file system cannot back a FUSE file, or passthrough was not negotiated
_MOUNT_WIDE = (errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTTY, errno.ENOSYS)


@dataclass(slots=True)
class _Backed:
    backing_id: int
    handles: int


class PassthroughOpens:
    """Per-mount state: backing ids per inode, ordinary handles per inode, counters."""

    def __init__(
        self,
        open_id: Callable[[int], int],
        close_id: Callable[[int], None],
        *,
        wanted: bool,
        max_ids: int = MAX_BACKING_IDS,
    ) -> None:
        self._open_id = open_id
        self._close_id = close_id
        self.max_ids = max_ids
        self.wanted = wanted
        #: "passthrough", or why not ("off: --no-passthrough", "off: kernel", ...)
        self.mode = "passthrough" if wanted else "off: --no-passthrough"
        self._backed: dict[int, _Backed] = {}  # ino -> its backing id and passthrough handles
        self._ordinary: dict[int, int] = {}  # ino -> ordinary handles open
        self._fh_ino: dict[int, tuple[int, bool]] = {}  # fh -> (ino, passthrough?)
        self.opens = 0  # passthrough opens answered
        self.ordinary_opens = 0
        self.ids_opened = 0
        self.ids_closed = 0

    @property
    def active(self) -> bool:
        return self.mode == "passthrough"

    def disable(self, why: str) -> None:
        """Stop passthrough for this mount (logged once); open handles keep theirs."""
        if self.active:
            log.warning("FUSE passthrough off for this mount (%s): reads go through the daemon", why)
        self.mode = f"off: {why}"

    # --- OPEN -------------------------------------------------------------------------------
    def existing(self, ino: int) -> int | None:
        """The backing id to answer an open of ``ino`` with, without any I/O, if the inode
        already has passthrough handles (the kernel requires the same one)."""
        b = self._backed.get(ino)
        return b.backing_id if b is not None else None

    def may_try(self, ino: int) -> bool:
        """Whether an open of ``ino`` may look for a backing file (then call :meth:`register`)."""
        return self.active and ino not in self._ordinary and len(self._backed) < self.max_ids

    def register(self, ino: int, fd: int | None) -> int | None:
        """A backing id for ``ino`` from the verified file ``fd`` (closed here), or None for
        an ordinary open. Call after :meth:`may_try`; other opens may have run meanwhile."""
        try:
            known = self.existing(ino)
            if known is not None or fd is None:
                return known
            if not self.may_try(ino):
                return None
            try:
                backing_id = self._open_id(fd)
            except OSError as exc:
                if exc.errno in _MOUNT_WIDE:
                    self.disable(f"backing file refused: {os.strerror(exc.errno)}")
                else:
                    log.warning("FUSE passthrough: backing file of inode %d refused: %s", ino, exc)
                return None
            self.ids_opened += 1
            self._backed[ino] = _Backed(backing_id, 0)
            return backing_id
        finally:
            if fd is not None:
                os.close(fd)

    def opened(self, fh: int, ino: int, backing_id: int | None) -> None:
        """Record the handle the open is answered with (passthrough if ``backing_id``)."""
        if backing_id is not None:
            self._backed[ino].handles += 1
            self.opens += 1
        else:
            self._ordinary[ino] = self._ordinary.get(ino, 0) + 1
            self.ordinary_opens += 1
        self._fh_ino[fh] = (ino, backing_id is not None)

    def failed(self, ino: int) -> None:
        """The open was not answered after :meth:`register` gave an id: drop it if unused."""
        b = self._backed.get(ino)
        if b is not None and b.handles == 0:
            self._release_id(ino, b)

    # --- RELEASE ----------------------------------------------------------------------------
    def released(self, fh: int) -> None:
        got = self._fh_ino.pop(fh, None)
        if got is None:
            return
        ino, passthrough = got
        if passthrough:
            b = self._backed[ino]
            b.handles -= 1
            if b.handles == 0:
                self._release_id(ino, b)
        else:
            left = self._ordinary[ino] - 1
            if left:
                self._ordinary[ino] = left
            else:
                del self._ordinary[ino]

    def _release_id(self, ino: int, b: _Backed) -> None:
        del self._backed[ino]
        self.ids_closed += 1
        try:
            self._close_id(b.backing_id)
        except OSError as exc:  # the session is gone (unmount): the kernel freed it
            log.debug("FUSE passthrough: closing backing id %d: %s", b.backing_id, exc)

    def close_all(self) -> None:
        for ino, b in list(self._backed.items()):
            self._release_id(ino, b)

    # --- visibility -------------------------------------------------------------------------
    def stats(self) -> dict:
        return {
            "mode": self.mode,
            "passthrough_opens": self.opens,
            "ordinary_opens": self.ordinary_opens,
            "backing_ids_open": len(self._backed),
            "backing_ids_opened": self.ids_opened,
        }
