"""Which opens of a read-only mount the kernel serves itself (FUSE passthrough): the
Python side of pyfuse3's C table of published backing files.

At OPEN of a file whose object is wholly in the disk tier, the mount verifies the page
file and *publishes* it to pyfuse3's C table (``passthrough_publish``: a backing id from
``FUSE_DEV_IOC_BACKING_OPEN`` and the descriptor's fstat). From then on, pyfuse3 answers
read-only opens of that inode in C, without entering Python, as long as the descriptor
still fstat()s as it did (any write, truncation, chmod or unlink moves its ctime): the
kernel serves reads and mmap from the file, and pyfuse3 answers the RELEASE too. A changed
file is retracted in C and its next open comes here, to be checked again (promise 2: the
kernel is never handed a file changed since it was verified).

The C table is the single owner of each inode's passthrough state, because the kernel's
rules (fs/fuse/iomode.c) span both kinds of handles: while an inode has passthrough
handles, every open of it must name the same backing file, and a cached (ordinary) open
fails. So this module keeps only the policy: which inodes may be published (none with
ordinary handles open), the bound (``max_ids``: the least recently published is retracted
first), retraction on eviction, the fallback when the mount cannot do passthrough, and
the counters. An open of an inode whose passthrough handles are still open, and whose held
file failed its check again, is answered with that file's backing id *and* direct I/O: the
kernel takes no open of the inode without that backing id (EIO), and direct I/O sends its
reads to the daemon.

The open policy is here too (:func:`open_route`, :meth:`PassthroughOpens.open`): which
opens take the passthrough path, and what an open gets (a passthrough handle, a cached
ordinary handle, or a direct-I/O one next to passthrough handles, which names their file).

No pyfuse3 here: the shim passes in the table (:class:`Table`), the view's page files and
its worker-thread runner, so this runs in plain unit tests. All methods run on the FUSE loop's thread (no lock needed), except
:meth:`PassthroughOpens.stats` and :meth:`PassthroughOpens.drain_hits`, whose table
calls are ordered with the loop's by the GIL (pyfuse3 runs the table with it held).
"""

from __future__ import annotations

import enum
import errno
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from datahub.cache.pagefile import settled_stat
from fuse_adapter.page_files import BackingFiles, Run, still_verified, verified_fd

log = logging.getLogger(__name__)

MAX_BACKING_IDS = 4096

#: errors that mean "this mount cannot use passthrough at all": no CAP_SYS_ADMIN, the
#: tier's file system cannot back a FUSE file, or passthrough was not negotiated
_MOUNT_WIDE = (errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTTY, errno.ENOSYS)


class Table(Protocol):
    """pyfuse3's C table of published backing files (third_party/pyfuse3, fastopen.h)."""

    def publish(self, ino: int, fd: int) -> int: ...
    def handle(self, ino: int) -> tuple[int, int] | None: ...
    def release(self, fh: int) -> bool: ...
    def retract(self, ino: int) -> bool: ...
    def retract_file(self, st_dev: int, st_ino: int) -> int: ...
    def handles(self, ino: int) -> int: ...
    def held_fd(self, ino: int) -> int: ...
    def revalidate(
        self, ino: int, size: int, nlink: int, ctime_ns: int, mtime_ns: int
    ) -> tuple[int, int] | None: ...
    def pin(self, ino: int) -> tuple[int, int] | None: ...
    def drain_hits(self) -> list[int]: ...
    def sweep(self, slots: int) -> list[int]: ...
    def stats(self) -> dict: ...


def fd_state(fd: int, *, settle: bool = False) -> tuple[int, int, int, int]:
    """What the C table compares, beyond the file's identity: (size, links, ctime, mtime).
    ``settle``: before a check, a recent mtime is set in the past first, so that any write
    after it shows (``datahub.cache.pagefile.settled_stat``)."""
    st = settled_stat(fd) if settle else os.fstat(fd)
    return (st.st_size, st.st_nlink, st.st_ctime_ns, st.st_mtime_ns)


class Route(enum.Enum):
    """Where an OPEN that reached Python goes."""

    #: answer ENOSYS: "open files yourself from now on" (zero-message opens)
    ZERO_MESSAGE = "zero-message"
    #: try a passthrough handle first (:meth:`PassthroughOpens.open`), else an ordinary one
    PASSTHROUGH = "passthrough"
    #: an ordinary handle through the daemon
    ORDINARY = "ordinary"


def open_route(*, write: bool, virtual: bool, zero_message_open: bool, passthrough: bool) -> Route:
    """The route of an OPEN that reached Python: writes (refused later by the view, EROFS),
    virtual files, files not published (yet) to the C table, and published files C found
    changed on disk. ``passthrough``: :attr:`PassthroughOpens.wanted`. Virtual files (their
    size changes) always get an ordinary handle, with direct I/O."""
    if zero_message_open and not write:
        return Route.ZERO_MESSAGE
    if passthrough and not write and not virtual:
        return Route.PASSTHROUGH
    return Route.ORDINARY


class PassthroughOpens:
    """Per-mount policy over the C table: what to publish, ordinary handles, counters."""

    def __init__(
        self, table: Table, *, wanted: bool, max_ids: int = MAX_BACKING_IDS, off: str = "zero-message opens"
    ) -> None:
        self.table = table
        self.max_ids = max_ids
        self.wanted = wanted
        #: "passthrough", or why not ("off: zero-message opens", "off: kernel", ...)
        self.mode = "passthrough" if wanted else f"off: {off}"
        self._published: OrderedDict[int, None] = OrderedDict()  # least recently published first
        #: each published inode's file, (st_dev, st_ino), and the inodes of each file: one page
        #: file may back several inodes (one object in two versions, a blob of two keys), and
        #: its eviction must retract them all (the C table's ``retract_file`` takes one)
        self._file_of: dict[int, tuple[int, int]] = {}
        self._inos_of: dict[tuple[int, int], set[int]] = {}
        self._ordinary: dict[int, int] = {}  # ino -> cached (non-direct) ordinary handles open
        self._fh_ino: dict[int, tuple[int, bool]] = {}  # ordinary fh -> (ino, direct I/O?)
        #: direct-I/O fh -> the table handle (``Table.pin``) that keeps its backing id open
        self._pins: dict[int, int] = {}
        self.python_opens = 0  # passthrough opens answered here (the first, or after a change)
        self.ordinary_opens = 0

    @property
    def active(self) -> bool:
        return self.mode == "passthrough"

    def disable(self, why: str, *, warn: bool = True) -> None:
        """Stop publishing for this mount (logged once); open handles keep theirs."""
        if self.active and warn:
            log.warning("FUSE passthrough off for this mount (%s): reads go through the daemon", why)
        self.mode = f"off: {why}"

    def enable(self) -> None:
        """Publish again after :meth:`disable` (the automatic read mode gave a switch up)."""
        if self.wanted:
            self.mode = "passthrough"

    def handles_open(self) -> int:
        """Passthrough handles open now (answered in C or in Python, not yet released)."""
        t = self.table.stats() if self.wanted else {}
        return t.get("c_opens", 0) + t.get("py_handles", 0) - t.get("releases", 0)

    # --- OPEN (the ones that reach Python) --------------------------------------------------
    def reuse(self, ino: int) -> tuple[int, int] | None:
        """``(fh, backing_id)`` for an open of ``ino`` from its entry in the table, if the
        file is unchanged (reached here: C does not answer opens, or the entry is retracted)."""
        if not self.wanted:
            return None
        got = self.table.handle(ino)
        if got is not None:
            self.python_opens += 1
        return got

    def held(self, ino: int) -> bool:
        """Whether the table holds a backing id for ``ino`` (its handles are open)."""
        return self.wanted and self.table.handles(ino) >= 0

    def may_publish(self, ino: int) -> bool:
        """Whether an open of ``ino`` may look for a backing file (then :meth:`publish`)."""
        return self.active and ino not in self._ordinary and not self.held(ino)

    def publish(
        self, ino: int, fd: int | None, still_verified: Callable[[], bool] | None = None
    ) -> tuple[int, int] | None:
        """Publish the verified file ``fd`` (owned by the table after, closed here
        otherwise) and take a handle of it, or None for an ordinary open. Call after
        :meth:`may_publish`; other opens may have run meanwhile.

        ``still_verified()``, asked after the table took its fstat of ``fd``: whether the
        file is still in the state it was verified in. Why: the table compares every later
        open with the fstat it takes here, so a change between the verification and that
        fstat would become its reference; asking after it closes the window (a change
        after the question is caught by the table at the next open)."""
        if fd is None:
            return None
        owned = False
        try:
            if not self.may_publish(ino):
                return None
            while len(self._published) >= self.max_ids:
                old, _ = self._published.popitem(last=False)
                self._forget(old)
                self.table.retract(old)
            st = os.fstat(fd)  # the entry's file: may_publish saw no entry, so publish makes one of fd
            try:
                self.table.publish(ino, fd)
            except OSError as exc:
                if exc.errno in _MOUNT_WIDE:
                    self.disable(f"backing file refused: {os.strerror(exc.errno)}")
                elif exc.errno not in (errno.EBUSY, errno.ENOSPC):
                    log.warning("FUSE passthrough: backing file of inode %d refused: %s", ino, exc)
                return None
            owned = True
            self._published[ino] = None
            self._remember(ino, (st.st_dev, st.st_ino))
            if still_verified is not None and not still_verified():
                log.warning(
                    "FUSE passthrough: backing file of inode %d changed while published; not used", ino
                )
                self.retract(ino)
                return None
            return self.reuse(ino)
        finally:
            if not owned:
                os.close(fd)

    async def open(self, ino: int, files: BackingFiles, run: Run) -> tuple[tuple[int, int] | None, bool]:
        """The passthrough part of an open of ``ino`` (:attr:`Route.PASSTHROUGH`):
        ``((fh, backing_id), False)`` for a passthrough handle, else ``(None, direct)``
        for an ordinary one, with direct I/O when passthrough handles of ``ino`` are open
        (then :meth:`opened` gives the backing id it must name). ``run``: the shim's
        worker-thread runner, for the steps that read files."""
        got = self.reuse(ino)
        if got is None and self.may_publish(ino):
            fd = await verified_fd(files, ino, run)
            got = self.publish(ino, fd, lambda: fd is not None and still_verified(files, ino, fd))
        if got is None and self.held(ino):
            # its passthrough handles hold a file that changed (e.g. evicted): the kernel
            # takes no other backing file until they close; check that one again
            state = await run(self.recheck, ino, files)
            got = self.revalidate(ino, state) if state is not None else None
            return got, got is None
        return got, False

    def recheck(self, ino: int, files: BackingFiles) -> tuple[int, int, int, int] | None:
        """Blocking: check the file the C table holds for ``ino`` again; its state
        (:func:`fd_state`) if it passed and did not change meanwhile, else None."""
        fd = self.held_fd(ino)
        if fd < 0:
            return None
        try:
            before = fd_state(fd, settle=True)
            if files.backing_check(ino, fd) and fd_state(fd) == before:
                return before
            return None
        except Exception as exc:  # the open still succeeds, through the daemon
            log.warning("passthrough open of inode %d: %s; reading through the daemon", ino, exc)
            return None
        finally:
            os.close(fd)

    def held_fd(self, ino: int) -> int:
        """A copy of the descriptor the table holds for ``ino`` (the caller closes it), -1 if none."""
        return self.table.held_fd(ino)

    def revalidate(self, ino: int, state: tuple[int, int, int, int]) -> tuple[int, int] | None:
        """The held file of ``ino`` was checked again and was in ``state`` (:func:`fd_state`)
        when it passed: a handle of it, if it is still in that state."""
        got = self.table.revalidate(ino, *state)
        if got is not None:
            self.python_opens += 1
        return got

    def opened(self, fh: int, ino: int, *, direct: bool) -> int:
        """Record an ordinary handle (``direct``: direct I/O); the backing id to answer its
        open with, or 0 for none.

        A direct-I/O open of an inode whose passthrough handles are open (its held file failed
        the check again: :meth:`open`) names their backing id: the kernel fails any open of
        such an inode without it (fs/fuse/iomode.c, ``fuse_file_io_open``: EIO, before it
        looks at ``FOPEN_DIRECT_IO``), and with ``FOPEN_DIRECT_IO`` beside it the handle's
        reads still come to the daemon (fs/fuse/file.c), which serves the version's bytes.
        The table keeps that id open until this handle is released (``Table.pin``). Before
        (wbfix73), the open was answered without it and failed with EIO."""
        backing = 0
        if direct and self.held(ino):
            got = self.table.pin(ino)
            if got is not None:
                self._pins[fh], backing = got
        if not direct:
            self._ordinary[ino] = self._ordinary.get(ino, 0) + 1
        self._fh_ino[fh] = (ino, direct)
        self.ordinary_opens += 1
        return backing

    def retract(self, ino: int) -> None:
        """No more passthrough opens of ``ino`` with its published file (e.g. evicted)."""
        self._published.pop(ino, None)
        self._forget(ino)
        if self.wanted:
            self.table.retract(ino)

    def evicted(self, st_dev: int, st_ino: int) -> None:
        """The tier removed this file: retract it for every inode it is published for (its
        space comes back with the last handle). One page file backs several inodes when
        they name one object (a record kept by two versions, a blob of two keys); the C
        table's ``retract_file`` retracts only the first entry it finds with the file, and
        finds it again at the next call if handles hold it, so the inodes are taken from
        this side's record of each published file. Another process's evictions are seen by
        C at the next open, or by :meth:`sweep`."""
        if not self.wanted:
            return
        for ino in sorted(self._inos_of.get((st_dev, st_ino), ())):
            self.retract(ino)

    def _remember(self, ino: int, file: tuple[int, int]) -> None:
        self._forget(ino)
        self._file_of[ino] = file
        self._inos_of.setdefault(file, set()).add(ino)

    def _forget(self, ino: int) -> None:
        file = self._file_of.pop(ino, None)
        if file is not None:
            inos = self._inos_of[file]
            inos.discard(ino)
            if not inos:
                del self._inos_of[file]

    def sweep(self, slots: int) -> int:
        """Retract the published files another process removed (evicted) or changed, which
        nothing else tells this mount: C fstat()s the held files of ``slots`` slots of its
        table per call, going round it. How many; each one's backing id and space go now,
        or with its last handle."""
        if not self.wanted:
            return 0
        gone = self.table.sweep(slots)
        for ino in gone:
            self._published.pop(ino, None)
            self._forget(ino)
        return len(gone)

    def published_inodes(self) -> list[int]:
        """The inodes published, least recently first (``read_mode`` hands them over)."""
        return list(self._published)

    def drain_hits(self) -> list[int]:
        """Inodes opened in C since the last call (each once). Any thread: the table's
        calls all hold the GIL."""
        return self.table.drain_hits() if self.wanted else []

    # --- RELEASE (the ones that reach Python) -----------------------------------------------
    def released(self, fh: int) -> None:
        if self.wanted and self.table.release(fh):
            return
        pin = self._pins.pop(fh, None)
        if pin is not None:
            self.table.release(pin)
        got = self._fh_ino.pop(fh, None)
        if got is None:
            return
        ino, direct = got
        if direct:
            return
        left = self._ordinary[ino] - 1
        if left:
            self._ordinary[ino] = left
        else:
            del self._ordinary[ino]

    # --- visibility -------------------------------------------------------------------------
    def stats(self) -> dict:
        t = self.table.stats() if self.wanted else {}
        return {
            "mode": self.mode,
            "passthrough_opens": t.get("c_opens", 0) + t.get("py_handles", 0),
            "passthrough_opens_in_c": t.get("c_opens", 0),
            "passthrough_opens_in_python": self.python_opens,
            "releases_in_c": t.get("c_releases", 0),
            "passthrough_handles_open": t.get("c_opens", 0) + t.get("py_handles", 0) - t.get("releases", 0),
            "ordinary_opens": self.ordinary_opens,
            "backing_ids_open": t.get("entries", 0),
            "backing_ids_opened": t.get("ids_opened", 0),
            "backing_ids_closed": t.get("ids_closed", 0),
            "published": t.get("published", 0),
            "changed_on_disk": t.get("changed", 0),
            "backing_files_swept": t.get("swept", 0),
            "fastopen": bool(t.get("fastopen", False)),
            "fastloop": bool(t.get("fastloop", False)),
            "passthrough_opens_in_loop_thread": t.get("loop_opens", 0),
            "ioctls_in_loop_thread": t.get("loop_ioctls", 0),
            "forgets_in_loop_thread": t.get("loop_forgets", 0),
        }
