"""The writable workspace core: FUSE's inode world over the path-based Workspace API.

The write-back Workspace (``datahub.writeback``) speaks paths; the kernel speaks
inode numbers with lookup counts. This module keeps that mapping and nothing else: every
namespace or data operation is one Workspace call, so the write-back promise (a close or
fsync returns only once the bytes are durable in the shared tier and journaled) is the
Workspace's, kept intact. No pyfuse3 here; all methods block and run in worker threads.

Inodes: one per path the kernel knows (looked up, created, listed with readdirplus).
A rename moves the path of the inode and of everything below it. ``forget`` drops an
inode once the kernel has forgotten every lookup and no handle holds it open.

Passthrough writes (``backing`` set, docs/writeback.md "Writes through a mount"): a file
created, or opened with ``O_TRUNC`` and open nowhere else, is *staged*: its bytes live in
a local file the workspace made (``Workspace.open(staged=True)``), registered with the
kernel as the backing file of every handle of that inode while any is open
(``FUSE_DEV_IOC_BACKING_OPEN``). The kernel then serves the handles' reads and writes
itself; FLUSH (each close(2)) and FSYNC still reach us and commit the file, which keeps
the write-back promise. The kernel's rule (fs/fuse/iomode.c) that all opens of an inode
with passthrough handles name the same backing file holds because all handles of a file
share one open workspace file: it is staged for all of them or for none. Quota: the kernel
writes without asking, so a staged file is charged at each flush/fsync and size-changing
setattr (a close past the quota fails with ENOSPC and reverts the file, as a write past
it does otherwise); within ``STAGE_HEADROOM`` of the quota, new files are not staged, so
writes are charged one by one again.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import resource
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from datahub.errors import AlreadyExists, DatahubError, InvalidInput, NoSpace, NotFound, StorageError
from datahub.validation import check_new_key
from fuse_adapter.quota import Quota
from fuse_adapter.readonly import Stat
from fuse_adapter.tree import ROOT_INODE

log = logging.getLogger(__name__)

STAGE_HEADROOM = 64 * 1024**2  # with a quota, files are staged only while this much is left
#: errors of BACKING_OPEN that mean "this mount cannot do passthrough": no CAP_SYS_ADMIN,
#: a staging file system that cannot back a FUSE file, passthrough not negotiated
_MOUNT_WIDE = (errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTTY, errno.ENOSYS)


class CWrites(Protocol):
    """pyfuse3's write table (``fastwrite_publish``/``_retract``/``_failed``; fastwrite.h)."""

    def publish(self, fh: int, fd: int) -> None: ...
    def retract(self, fh: int) -> int | None: ...
    def failed(self, fh: int) -> int: ...


class Backing(Protocol):
    """The kernel's backing files (pyfuse3's ``passthrough_open``/``passthrough_close``)."""

    def open(self, fd: int) -> int: ...
    def close(self, backing_id: int) -> None: ...


@dataclass(slots=True)
class _Staged:
    backing_id: int  # 0: the kernel refused it; the inode's handles go through the daemon
    #: the handle whose staged file the backing id was opened on: its ``staged_fd`` is that
    #: file's descriptor while the file is open, -1 once it closed (``_backing_of``)
    opener: object
    handles: int = 0
    charged: int = 0  # bytes of the file counted in the quota


@dataclass(slots=True)
class _Inode:
    path: str | None  # None once unlinked (still open somewhere)
    lookups: int = 0
    opened: int = 0


class WorkspaceView:
    def __init__(
        self, workspace, *, uid: int | None = None, gid: int | None = None, quota: Quota | None = None
    ) -> None:
        self.ws = workspace  # datahub.writeback.Workspace
        self.quota = quota  # None: no limit (fuse_adapter/quota.py)
        self._short: set[int] = set()  # handles that ran out of space: their file is reverted at close
        # short handles whose file a close already reverted: not again at the next close or
        # the release while another handle shares the file (``_again``)
        self._reverted: set[int] = set()
        # short handles whose file lost a cached WRITE to an error other than space (EIO):
        # refused with StorageError, not NoSpace (``_short_file``)
        self._failed: set[int] = set()
        # handles that wrote through the daemon since their own last successful fsync or close:
        # a revert of their file for another handle drops those bytes, so their close is
        # refused too (``_refuse_dropped``), never 0 with the bytes gone (review13c)
        self._dirty: set[int] = set()
        # WRITEs and truncates through each handle (counted once each has changed the file),
        # and that count as its last successful fsync or close found it: a RELEASE commits only
        # a handle that changed the file since (``_changed_since_close``)
        self._changes: dict[int, int] = {}
        self._closed_at: dict[int, int] = {}
        # handles opened read-only: the kernel writes nothing through them, passthrough or not
        self._readers: set[int] = set()
        # handles opened with O_SYNC/O_DSYNC and served with direct I/O (``_backing_of``): the
        # kernel sends no FSYNC after their writes, so each WRITE commits before it is answered
        self._syncs: set[int] = set()
        # handles served with direct I/O (``_backing_of``): the kernel follows none of their
        # WRITEs with an FSYNC, not even one made with RWF_DSYNC/RWF_SYNC (``write``'s ``sync``)
        self._direct: set[int] = set()
        # inodes whose name an unlink or a replacing rename took while they were open, with the
        # bytes the quota counts for them (a staged one's are its ``_Staged.charged`` while it is
        # staged): as on ext4, a file open with no name keeps its space, charged as any file's
        # (growth charged, cuts refunded), until its last close refunds it (``release``). Before,
        # the name's going refunded the whole size, and a hole cut while it was named was then
        # filled uncharged, past any quota (review14b).
        self._nameless: dict[int, int] = {}
        # set by the FUSE layer: tell the kernel a name is gone (a reverted file gets a new inode)
        self.forget_entry: Callable[[int, str], None] = lambda parent_ino, name: None
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self._lock = threading.Lock()  # guards the maps below; never held during a Workspace call
        self._inodes: dict[int, _Inode] = {ROOT_INODE: _Inode("", lookups=1)}
        self._by_path: dict[str, int] = {"": ROOT_INODE}
        self._next_ino = itertools.count(ROOT_INODE + 1)
        self._handles: dict[int, tuple[int, object]] = {}  # fh -> (inode, FileHandle)
        self._last: dict[int, Stat] = {}  # last attributes of open inodes (answers fstat after unlink)
        self._next_fh = itertools.count(1)
        # passthrough writes: set by the FUSE layer once INIT agreed (None: off, see ``writes``)
        self.backing: Backing | None = None
        self.writes = "through the daemon"  # how writes reach the workspace (for the mount's log)
        self._staged: dict[int, _Staged] = {}  # inode -> its staged file's backing id and handles
        # the kernel's write-back cache (``kernel_cache_on``): WRITEs carry any writable handle
        self.kernel_cache = False
        # WRITEs of staged handles answered in C (``c_writes_on``; None: every WRITE in Python)
        self.cwrites: CWrites | None = None
        self._published: set[int] = set()  # handles whose WRITEs the C table answers
        self._unpublished_said = False  # logged once: a staged handle the table would not take

    # --- passthrough writes ----------------------------------------------------------------------
    def passthrough_on(self, backing: Backing) -> None:
        self.backing = backing
        self.writes = "passthrough (the kernel writes staged files; FLUSH/FSYNC commit them)"
        log.info("workspace %r: writes: %s", self.ws.name, self.writes)
        raise_descriptor_limit(f"workspace {self.ws.name!r}")

    def c_writes_on(self, table: CWrites) -> None:
        """WRITEs through the daemon, answered in C for staged files (docs/writeback.md, "WRITEs
        answered in C"): a file created, or opened with ``O_TRUNC`` and open nowhere else, is
        staged as with ``--passthrough``, but its handles are served through the daemon, and
        pyfuse3's C reader thread answers their WRITEs with a ``pwrite`` to the staged file
        (fastwrite.h), without the GIL. Every WRITE still reaches the daemon (ENOTCONN after a
        busy unmount, a failure at the write(2) that met it), and a failed one is recorded
        in C and read at each FLUSH/FSYNC/RELEASE (``_absorb``): the file is then reverted at
        close, never committed torn. FLUSH and FSYNC commit the staged file as passthrough's
        are (``StagedFile.fsync``: copied into the shared tier, not through Python buffers)."""
        self.cwrites = table
        # no reservation or watcher for staged files: none of their writes fails unseen
        self.ws.staging().writes_seen = True
        self.writes = "through the daemon, staged files' WRITEs answered in C (FLUSH/FSYNC commit them)"
        log.info("workspace %r: writes: %s", self.ws.name, self.writes)
        raise_descriptor_limit(f"workspace {self.ws.name!r}")

    def c_writes_unavailable(self, why: str, *, asked: bool) -> None:
        """Every WRITE in Python (the daemon path), said once: as the mount was told (info)
        or because the build or the session cannot (a warning)."""
        (log.warning if asked else log.info)(
            "workspace %r: writes go through the daemon in Python (WRITEs in C off: %s)", self.ws.name, why
        )

    def kernel_cache_on(self) -> None:
        """Writes through the daemon from the kernel's write-back cache (``--writeback-cache``):
        write(2) returns once its bytes are in the page cache, and the kernel sends them in
        WRITEs later, all of them before the FLUSH of a close (fs/fuse/file.c ``fuse_flush``).
        Those WRITEs carry the file handle the kernel picks among the file's writable ones, not
        the one that wrote, so ``_refuse_dropped`` counts every other writable handle as
        having written, as for staged files."""
        self.kernel_cache = True
        self.writes = "through the daemon from the kernel's write-back cache (FLUSH/FSYNC commit)"
        log.info("workspace %r: writes: %s", self.ws.name, self.writes)

    def passthrough_off(self, why: str, *, asked: bool = True) -> None:
        """Writes through the daemon; ``asked=False``: as the mount was told (the default),
        so said at info level, not as a warning."""
        if not asked:
            log.info("workspace %r: writes go through the daemon (%s)", self.ws.name, why)
        elif self.backing is not None or not self.writes.startswith("off"):
            log.warning(
                "workspace %r: passthrough writes off (%s): writes go through the daemon", self.ws.name, why
            )
        self.backing = None
        self.writes = f"off: {why}"

    def _may_stage(self) -> bool:
        return (self.backing is not None or self.cwrites is not None) and (
            self.quota is None or self.quota.available >= STAGE_HEADROOM
        )

    def _stages(self, sync: bool) -> bool:
        """Whether a file created or rewritten (``O_TRUNC``) now is staged. Not one opened with
        ``O_SYNC``/``O_DSYNC`` on a passthrough mount (``sync``): the kernel writes a passthrough
        handle's backing file with its own sync, to the node's disk, and sends the daemon no
        FSYNC, so a ``write(2)`` that returned was in no commit (wbreview43). Through the
        daemon, the kernel follows each such write with an FSYNC, which commits it."""
        return self._may_stage() and not (sync and self.backing is not None)

    @staticmethod
    def _noatime(handle, noatime: bool) -> None:
        """A handle opened with ``O_NOATIME`` (``noatime``) of a staged file: the kernel opens
        its backing file with the caller's flags, so a mapping made through it moves no atime
        of the staged file, which is how the staged file tells it may be mapped
        (``StagedFile.maybe_mapped``): it is then treated as mapped (wbreview43). Before, such
        a mapping's stores into pages already dirty at a commit were never seen (the close
        returned 0 with the older bytes committed), and its stores after the last close were
        let go with the staged file."""
        if noatime and handle.staged_fd >= 0:
            handle.assume_mapped()

    def _backing_of(self, ino: int, handle, *, sync: bool = False) -> tuple[int, bool]:
        """(backing id, direct I/O?) for a new handle of ``ino``: the staged file's id (made on
        the inode's first staged handle), or (0, False) for an ordinary handle. A staged file
        the kernel would not take is served through the daemon with direct I/O.

        ``sync``: a writer opened with ``O_SYNC``/``O_DSYNC`` (only one of a file another handle
        holds staged gets here: ``_stages``). It gets the staged file's id, as the kernel
        demands of every open beside passthrough handles (fs/fuse/iomode.c), *and* direct I/O,
        which overrides passthrough for its reads and writes (fs/fuse/file.c): its WRITEs come
        to the daemon, which writes the same staged file and commits it before answering
        (``write``). Why (wbreview72): as one more passthrough handle, the kernel wrote and
        synced the staged file and told the daemon nothing, so an ``O_SYNC`` write that had
        returned was gone after a kill -9. With WRITEs answered in C the handle is cached as
        any, and the kernel follows each such write with an FSYNC.

        A record of another staged file is not this handle's (the kernel would write that
        file): it is one whose last release closed it and has not dropped the record yet (an
        ``open(O_TRUNC)`` right after a close, served while that RELEASE runs on another
        thread). Its handles are all gone, so the record is replaced, and each release drops
        its own (``_unstage``). Before, the open took the closed file's backing id, and its
        close committed the new staged file, empty, and returned 0 (flake17)."""
        fd = handle.staged_fd
        if fd < 0:
            return 0, False
        with self._lock:
            staged = self._staged.get(ino)
            if staged is None or staged.opener.staged_fd != fd:
                staged = self._staged[ino] = _Staged(self._open_backing(fd), handle)
            staged.handles += 1
            # the daemon path with WRITEs in C: the page cache as for any file of this mount (no
            # passthrough handle beside it); a READ the cache misses preads the staged file
            return staged.backing_id, (sync or staged.backing_id == 0) and self.cwrites is None

    def _open_backing(self, fd: int) -> int:
        backing = self.backing
        if backing is None:
            return 0
        try:
            return backing.open(fd)
        except OSError as exc:
            if exc.errno in _MOUNT_WIDE:
                self.passthrough_off(f"backing file refused: {os.strerror(exc.errno)}")
            else:
                log.warning(
                    "workspace %r: backing file refused (%s); writing through the daemon", self.ws.name, exc
                )
            return 0

    def _unstage(self, ino: int, staged: _Staged | None) -> _Staged | None:
        """One staged handle of ``ino`` is gone, ``staged`` its record (taken while the handle
        was open; the caller holds ``_lock``); the last one drops the record, unless another
        staged file's replaced it (``_backing_of``), and returns it, for its backing id to go
        (``_close_backing``) and its charge to a file without a name (``release``)."""
        if staged is None:
            return None
        staged.handles -= 1
        if staged.handles > 0:
            return None
        if self._staged.get(ino) is staged:
            del self._staged[ino]
        return staged

    def _close_backing(self, staged: _Staged) -> None:
        if staged.backing_id and self.backing is not None:
            try:
                self.backing.close(staged.backing_id)
            except OSError as exc:
                log.warning("workspace %r: closing backing id %d: %s", self.ws.name, staged.backing_id, exc)

    def _charge_staged(self, fh: int, *, force: bool = False) -> None:
        """Charge the quota with what the kernel wrote to a staged file since the last charge
        (``force``: take it even past the limit, e.g. at release, where nothing can fail)."""
        if self.quota is None:
            return
        ino, handle = self._handles[fh]
        size = handle.size()
        with self._lock:
            staged = self._staged.get(ino)
            if staged is None:
                return
            growth = size - staged.charged
            if growth > 0 and force:
                self.quota.force(growth)
            else:  # NoSpace: a close reverts the file (``flush``), an fsync leaves it as it is
                self.quota.charge(growth, self._label(ino))
            staged.charged = size

    # --- the inode <-> path map --------------------------------------------------------------------
    def path_of(self, ino: int) -> str:
        with self._lock:
            node = self._inodes.get(ino)
            if node is None or node.path is None:
                raise NotFound(f"inode {ino} is no longer in workspace {self.ws.name!r}")
            return node.path

    def _child(self, parent: int, name: str) -> str:
        if "/" in name or name in ("", ".", ".."):
            raise InvalidInput(f"invalid file name {name!r}")
        base = self.path_of(parent)
        return f"{base}/{name}" if base else name

    def _new_child(self, parent: int, name: str) -> str:
        """The path of a name being created (or renamed to): refused with InvalidKey (EINVAL)
        if no version could hold it, e.g. a reserved ``.datahub-hint-`` name that a mount of
        the committed version would never show (docs/semantics.md)."""
        return check_new_key(self._child(parent, name))

    def _remember(self, path: str, lookups: int = 1) -> int:
        with self._lock:
            ino = self._by_path.get(path)
            if ino is None:
                ino = next(self._next_ino)
                self._by_path[path] = ino
                self._inodes[ino] = _Inode(path)
            self._inodes[ino].lookups += lookups
            return ino

    def _stat(self, ino: int, attr) -> Stat:
        if attr.is_dir:
            mode, nlink = stat.S_IFDIR | (attr.mode & 0o7777), 2
        else:
            mode, nlink = stat.S_IFREG | (attr.mode & 0o7777), 1
        return Stat(ino, mode, nlink, attr.size, int(attr.mtime * 1e9), self.uid, self.gid)

    def forget(self, ino: int, n: int) -> None:
        with self._lock:
            node = self._inodes.get(ino)
            if node is None or ino == ROOT_INODE:
                return
            node.lookups -= n
            self._maybe_drop(ino, node)

    def _maybe_drop(self, ino: int, node: _Inode) -> None:
        if node.lookups <= 0 and node.opened <= 0:
            del self._inodes[ino]
            self._nameless.pop(ino, None)
            if node.path is not None and self._by_path.get(node.path) == ino:
                del self._by_path[node.path]

    def _moved(self, old: str, new: str, replaced_charge: int = 0) -> None:
        """A rename of ``old`` to ``new``; ``replaced_charge``: what the quota counted for a
        file it replaced there."""
        with self._lock:
            moved = [(p, i) for p, i in self._by_path.items() if p == old or p.startswith(old + "/")]
            for path, _ in moved:
                del self._by_path[path]
            replaced = self._by_path.pop(new, None)
            if replaced is not None:
                self._inodes[replaced].path = None
            refund = self._name_went(replaced, replaced_charge)
            for path, ino in moved:
                newpath = new + path[len(old) :]
                self._by_path[newpath] = ino
                self._inodes[ino].path = newpath
        self._refund(refund)

    def _gone(self, path: str, charged: int = 0) -> None:
        """``path``'s name went (unlink, rmdir); ``charged``: what the quota counted for it."""
        with self._lock:
            ino = self._by_path.pop(path, None)
            if ino is not None:
                self._inodes[ino].path = None
            refund = self._name_went(ino, charged)
        self._refund(refund)

    def _name_went(self, ino: int | None, charged: int) -> int:
        """What to refund now that the name of ``ino`` (None: not known here) went: all it was
        charged (``charged``) if no handle has it open, else nothing: it keeps its charge until
        its last close (``_nameless``). Decided under ``_lock``, as ``release`` decides its
        last close, so exactly one of the two refunds it."""
        if ino is None or self._inodes[ino].opened <= 0:
            return charged
        if ino in self._staged:  # its charge stays in its ``_Staged`` (``_file_size`` left it there)
            self._nameless[ino] = 0
        else:  # the size its writes were charged against, with any charged since ``charged`` was read
            last = self._last.get(ino)
            self._nameless[ino] = charged if last is None else last.size
        return 0

    # --- quota accounting ---------------------------------------------------------------------------
    def _file_size(self, path: str, *, emptied: bool = False) -> int:
        """Bytes the quota counts for the file at ``path`` (0 if there is none, or it is a
        directory): its size, or what was charged of a staged file (``emptied``: an open with
        ``O_TRUNC`` empties it, so that is zeroed to be refunded; a name that goes leaves it
        there, as the open file keeps its charge: ``_name_went``)."""
        with self._lock:
            ino = self._by_path.get(path)
            staged = self._staged.get(ino) if ino is not None else None
            if staged is not None:
                charged = staged.charged
                if emptied:
                    staged.charged = 0
                return charged
        try:
            attr = self.ws.stat(path)
        except NotFound:
            return 0
        return 0 if attr.is_dir else attr.size

    def _label(self, ino: int) -> str:
        """How a quota error names the file: its path, or its inode once its name went."""
        node = self._inodes.get(ino)
        return (node.path if node is not None else None) or f"inode {ino}"

    def _refund(self, nbytes: int) -> None:
        if self.quota is not None:
            self.quota.refund(nbytes)

    # --- namespace -------------------------------------------------------------------------------
    def lookup(self, parent: int, name: str) -> Stat:
        path = self._child(parent, name)
        attr = self.ws.stat(path)
        return self._stat(self._remember(path), attr)

    def getattr(self, ino: int) -> Stat:
        with self._lock:
            node = self._inodes.get(ino)
            unlinked = node is not None and node.path is None and ino in self._last
            if unlinked:  # unlinked but still open: what we last knew, with no links left
                last = self._last[ino]
                if ino not in self._staged:
                    return Stat(ino, last.mode, 0, last.size, last.mtime_ns, last.uid, last.gid)
                # a staged file's writes never tell ``_last`` (the kernel writes it through a
                # passthrough handle, or C answers its WRITEs): the staged file says, through a
                # handle still open (review19d: ``_Staged.opener.attr()`` was unpacked as a
                # tuple, so fstat(2) failed with EIO, EINVAL once that first handle closed).
                # Before wbreview42 only WRITEs answered in C asked it: on a ``--passthrough``
                # mount an unlinked (or replaced) staged file answered the size it had at its
                # open, so fstat(2) and lseek(SEEK_END) said 0 bytes and a write at the end
                # went over its first bytes.
                # Under the lock: a RELEASE takes its handle out of ``_handles`` before closing it.
                live = next((h for i, h in self._handles.values() if i == ino and h.staged_fd >= 0), None)
                if live is None:
                    return Stat(ino, last.mode, 0, last.size, last.mtime_ns, last.uid, last.gid)
                now = live.attr()
                return Stat(ino, last.mode, 0, now.size, int(now.mtime * 1e9), last.uid, last.gid)
        st = self._stat(ino, self.ws.stat(self.path_of(ino)))
        with self._lock:
            if self._inodes.get(ino) is not None and self._inodes[ino].opened:
                self._last[ino] = st
        return st

    def truncate(self, ino: int, size: int, fh: int | None = None) -> Stat:
        """Charged with a quota, a file without a name too (``_nameless``): writes below its
        size add nothing to charge, so a growth left uncharged would let the writes that
        fill the hole pass the quota (review14b), and a cut refunds what it frees, so a
        scratch file emptied and refilled is charged one round's bytes, not every round's."""
        if self.quota is None:
            return self._truncate(ino, size, fh)
        return self._charged_truncate(ino, size, fh)

    def _truncate(self, ino: int, size: int, fh: int | None = None) -> Stat:
        done = False
        if fh is not None and fh in self._handles:
            try:
                self._handles[fh][1].truncate(size)
            finally:
                self._changed(fh)
            done = True
        else:  # by path: through a writer of the file if one is open (``_writer_of``)
            writer = self._writer_of(ino)
            done = writer is not None and self._truncated_through(writer, size)
        if done:
            with self._lock:
                last = self._last.get(ino)
                if last is not None:
                    self._last[ino] = Stat(
                        ino, last.mode, last.nlink, size, last.mtime_ns, last.uid, last.gid
                    )
        else:
            self.ws.truncate(self.path_of(ino), size)
        return self.getattr(ino)

    def _writer_of(self, ino: int) -> int | None:
        """A handle of ``ino`` open for writing whose close may still commit (not short), or
        None. A truncate by path (SETATTR with no handle: ``truncate(2)``) is made through it
        when there is one, counted as its change (``_changed``), so that handle's close or
        RELEASE commits it or, refused, reverts it with its own writes. Why (wbreview42):
        ``Workspace.truncate`` commits the open file as it is, with every handle's writes not
        yet acknowledged (an ``O_TRUNC`` rewrite): that writer's close then refused for space
        "went back to its last fsync or close", which was the truncate's commit, and bytes
        whose close returned ENOSPC were the file, after the close and after kill -9. Counted
        here, before the cut, under ``_lock``: a RELEASE deciding after it commits it."""
        with self._lock:
            for fh, (i, _handle) in self._handles.items():
                if i == ino and fh not in self._readers and fh not in self._short:
                    self._changes[fh] = self._changes.get(fh, 0) + 1
                    return fh
        return None

    def _truncated_through(self, fh: int, size: int) -> bool:
        """Truncate through the writer ``fh`` (``_writer_of``); False if nothing was cut because
        the handle went meanwhile, or if its RELEASE took it out of ``_handles`` before the cut
        was done (its commit may have run first): the caller commits the truncate itself."""
        entry = self._handles.get(fh)
        if entry is None:
            return False
        try:
            entry[1].truncate(size)
        except InvalidInput:  # closed meanwhile (``FileHandle._check``)
            return False
        with self._lock:
            return fh in self._handles

    def _charged_truncate(self, ino: int, size: int, fh: int | None) -> Stat:
        assert self.quota is not None
        with self._lock:
            staged = self._staged.get(ino)
            charged = staged.charged if staged is not None else None
        if charged is not None:  # a staged file: what the kernel wrote was not charged yet
            growth = size - charged
            if growth > 0:
                self.quota.charge(growth, self._label(ino))
            try:
                st = self._truncate(ino, size, fh)
            except BaseException:
                self.quota.refund(growth)
                raise
            self.quota.refund(-growth)
            with self._lock:
                if staged is not None:
                    staged.charged = size
            return st
        growth = size - self.getattr(ino).size
        if growth <= 0:  # shrinking frees space once it happened
            st = self._truncate(ino, size, fh)
            with self._lock:  # a nameless file's count never goes below 0 (``_nameless``)
                freed = min(-growth, self._nameless[ino]) if ino in self._nameless else -growth
                if ino in self._nameless:
                    self._nameless[ino] -= freed
            self.quota.refund(freed)
            return st
        self.quota.charge(growth, self._label(ino))
        try:
            st = self._truncate(ino, size, fh)
        except BaseException:
            self.quota.refund(growth)
            raise
        with self._lock:
            if ino in self._nameless:  # refunded at its last close
                self._nameless[ino] += growth
        return st

    def readdir(self, ino: int, start: int) -> list[tuple[str, Stat, int]]:
        """Entries from offset ``start`` (offsets are positions in the name-sorted listing)."""
        path = self.path_of(ino)
        entries = self.ws.listdir(path)[start:]
        out = []
        for i, (name, attr) in enumerate(entries, start + 1):
            child = f"{path}/{name}" if path else name
            out.append((name, self._stat(self._remember(child, 0), attr), i))
        return out

    def confirm_listed(self, st: Stat) -> None:
        """The kernel took a readdirplus entry: that counts as one lookup."""
        with self._lock:
            node = self._inodes.get(st.ino)
            if node is not None:
                node.lookups += 1

    def mkdir(self, parent: int, name: str) -> Stat:
        path = self._new_child(parent, name)
        self.ws.mkdir(path)
        return self._stat(self._remember(path), self.ws.stat(path))

    def rmdir(self, parent: int, name: str) -> None:
        path = self._child(parent, name)
        self.ws.rmdir(path)
        self._gone(path)

    def unlink(self, parent: int, name: str) -> None:
        path = self._child(parent, name)
        size = self._file_size(path) if self.quota is not None else 0
        self.ws.unlink(path)
        self._gone(path, size)

    def rename(self, parent: int, name: str, new_parent: int, new_name: str, *, noreplace: bool) -> None:
        old, new = self._child(parent, name), self._new_child(new_parent, new_name)
        if noreplace:
            try:
                self.ws.stat(new)
            except NotFound:
                pass
            else:
                raise AlreadyExists(f"{new!r} already exists in workspace {self.ws.name!r}")
        replaced = self._file_size(new) if self.quota is not None and old != new else 0
        self.ws.rename(old, new)
        self._moved(old, new, replaced)

    # --- files -----------------------------------------------------------------------------------
    def _register(
        self, ino: int, handle: object, st: Stat, *, sync: bool = False, direct: bool = False
    ) -> int:
        """``sync``: each WRITE of the handle commits before it is answered (``_syncs``);
        ``direct``: served with direct I/O (``_direct``)."""
        fh = next(self._next_fh)
        with self._lock:
            self._handles[fh] = (ino, handle)
            if sync:
                self._syncs.add(fh)
            if direct:
                self._direct.add(fh)
            self._inodes[ino].opened += 1
            self._last[ino] = st
        return fh

    def create(
        self, parent: int, name: str, *, exclusive: bool, sync: bool = False, noatime: bool = False
    ) -> tuple[int, Stat, int, bool]:
        """(fh, attributes, backing id or 0, direct I/O?) of a new file; ``sync``: opened with
        ``O_SYNC`` or ``O_DSYNC`` (``_stages``); ``noatime``: with ``O_NOATIME`` (``_noatime``)."""
        path = self._new_child(parent, name)
        if exclusive:
            try:
                self.ws.stat(path)
            except NotFound:
                pass
            else:
                raise AlreadyExists(f"{path!r} already exists in workspace {self.ws.name!r}")
        replaced = self._file_size(path, emptied=True) if self.quota is not None else 0
        handle = self.ws.open(path, create=True, truncate=True, staged=self._stages(sync))
        self._refund(replaced)
        self._noatime(handle, noatime)
        ino = self._remember(path)
        st = self._stat(ino, handle.attr())  # what ``ws.stat(path)`` reads, without the read
        backing_id, direct = self._backing_of(ino, handle, sync=sync)
        fh = self._register(ino, handle, st, sync=sync and direct, direct=direct)
        self._publish(fh, handle)
        return fh, st, backing_id, direct

    def creates_in_memory(self, parent: int, name: str) -> bool:
        """Whether ``create`` of ``name`` would do no I/O and wait for nothing (not staged:
        a staged file is made and reserved on disk; ``Workspace.creates_in_memory``): the
        FUSE layer then answers the CREATE without a worker-thread hop."""
        if self._may_stage():
            return False
        try:
            path = self._child(parent, name)
        except (InvalidInput, NotFound):
            return False
        return self.ws.creates_in_memory(path)

    def open(
        self, ino: int, *, truncate: bool, writable: bool = True, sync: bool = False, noatime: bool = False
    ) -> tuple[int, int, bool]:
        """(fh, backing id or 0, direct I/O?) of a new handle of ``ino``; ``writable`` False for
        an ``O_RDONLY`` open, which a revert for another handle never refuses (``_refuse_dropped``);
        ``sync``: opened with ``O_SYNC`` or ``O_DSYNC`` (``_stages``); ``noatime``: with
        ``O_NOATIME`` (``_noatime``)."""
        path = self.path_of(ino)
        emptied = self._file_size(path, emptied=True) if self.quota is not None and truncate else 0
        handle = self.ws.open(path, truncate=truncate, staged=truncate and self._stages(sync))
        self._refund(emptied)
        self._noatime(handle, noatime)
        sync = sync and writable  # a reader writes nothing to sync
        backing_id, direct = self._backing_of(ino, handle, sync=sync)
        fh = self._register(ino, handle, self._stat(ino, handle.attr()), sync=sync and direct, direct=direct)
        if not writable:
            with self._lock:
                self._readers.add(fh)
        self._publish(fh, handle)
        return fh, backing_id, direct

    # --- WRITEs answered in C (``c_writes_on``) ----------------------------------------------------
    def _publish(self, fh: int, handle) -> None:
        """Hand ``fh``'s WRITEs to the C table if its file is staged (before the OPEN/CREATE
        is answered, so no WRITE of it comes first). A table that refuses (full: 4,096
        handles) leaves it to Python, which writes the same staged file: slower, never wrong."""
        if self.cwrites is None or handle.staged_fd < 0 or fh in self._readers:
            return  # a reader's handle gets no WRITE: the kernel sends them with writable ones
        try:
            self.cwrites.publish(fh, handle.staged_fd)
        except OSError as exc:
            if not self._unpublished_said:
                self._unpublished_said = True
                log.warning(
                    "workspace %r: a staged file's WRITEs go through Python (the C table refused it: %s); "
                    "said once", self.ws.name, exc,
                )  # fmt: skip
            return
        with self._lock:
            self._published.add(fh)

    def _absorb(self, fh: int) -> None:
        """A WRITE answered in C for ``fh`` failed (the table recorded its errno, for every
        handle of the staged file open then): ``fh`` is short, so its close reverts the file
        and is refused, as a failed WRITE on the daemon path makes it. Out of space (ENOSPC,
        EDQUOT): NoSpace; anything else: StorageError (``_check_short``)."""
        if self.cwrites is None or fh in self._readers:
            return  # a reader acknowledges nothing: ``flush`` and ``_check_short`` ask ``_c_torn``
        if fh in self._published:
            self._c_failed(fh, self.cwrites.failed(fh))
        elif self._c_torn(fh):  # a writer the table refused (full): its file's others say
            self._c_failed(fh, errno.EIO)

    def _c_torn(self, fh: int) -> bool:
        """Whether a WRITE answered in C failed for a handle of ``fh``'s staged file that is
        still open: the file may hold a torn write (it has no reservation to tell,
        ``Staging.writes_seen``) until a close of that handle reverts it. A reader's fsync
        is refused then, as beside a dropped cached write (``_dropped_beside``); its close
        commits nothing in any case (``flush``)."""
        if self.cwrites is None:
            return False
        entry = self._handles.get(fh)
        if entry is None or entry[1].staged_fd < 0:
            return False
        with self._lock:
            file_id = entry[1].file_id
            others = [
                o for o, (_, h) in self._handles.items() if o in self._published and h.file_id == file_id
            ]
        return any(self.cwrites.failed(other) for other in others)

    def _c_failed(self, fh: int, err: int | None) -> None:
        if not err:
            return
        with self._lock:
            if fh in self._handles:
                self._short.add(fh)
                if err not in (errno.ENOSPC, errno.EDQUOT):
                    self._failed.add(fh)

    def _retract(self, fh: int) -> None:
        """At RELEASE (the kernel sent every WRITE of ``fh`` before it), or at a FLUSH before
        its commit (``flush``): out of the C table, its recorded failure kept (``_absorb``)."""
        if self.cwrites is None or fh not in self._published:
            return
        with self._lock:
            self._published.discard(fh)
        self._c_failed(fh, self.cwrites.retract(fh))

    def read(self, fh: int, offset: int, size: int) -> bytes:
        return self._handles[fh][1].read(offset, size)

    def writes_in_memory(self, fh: int, offset: int, length: int) -> bool:
        """Whether ``write`` of this range only copies into the file's buffer (no I/O, no
        wait): the FUSE layer then answers the WRITE without a worker-thread hop."""
        entry = self._handles.get(fh)
        return entry is not None and fh not in self._syncs and entry[1].writes_in_memory(offset, length)

    def write(self, fh: int, offset: int, data: bytes, *, cached: bool = False, sync: bool = False) -> int:
        """``cached``: the WRITE carries pages the kernel writes back (its ``FUSE_WRITE_CACHE``
        flag: the write-back cache's, or a shared mapping's on any mount): the store or
        ``write(2)`` that dirtied them returned long ago, so a failure is answered as
        ``_short_file`` says. Any other WRITE (``O_DIRECT``, or no
        write-back cache) is the caller's ``write(2)`` itself and fails there: past the
        quota with ENOSPC, changing no byte of the file (``_charge_write`` charges before
        writing), its handle short so its close reverts, as on the daemon path. Before
        (review15wb), a direct WRITE past the quota on a ``--writeback-cache`` mount was
        answered as done with its bytes dropped: ``write(2)`` returned the full count and a
        read found zeros.

        A handle opened with ``O_SYNC``/``O_DSYNC`` and served with direct I/O (``_syncs``)
        commits its file before the WRITE is answered, as ``fsync`` does: the kernel follows
        such a write with an FSYNC only on the page-cache path (``generic_write_sync``), never
        after a direct-I/O one (wbreview72). So does any handle served with direct I/O
        (``_direct``) for a WRITE whose flags hold ``O_DSYNC`` (``sync``: a
        ``pwritev2(RWF_DSYNC/RWF_SYNC)``, pyfuse3's ``WRITE_SYNC``). Before (wbfix73), such a
        write to a staged file the kernel would not take as a backing file (served through the
        daemon with direct I/O) returned uncommitted, and was gone after a kill -9."""
        try:
            n = self._write(fh, offset, data, short=not cached)
        except NoSpace:
            if not cached:
                raise
            self._short_file(fh)
            return len(data)
        except (DatahubError, OSError) as exc:
            if cached and fh in self._handles:
                self._short_file(fh, failed=True)
            elif self.cwrites is not None and isinstance(exc, OSError) and fh in self._handles:
                # a staged handle's WRITE handed to Python: as one failed in C, every writable
                # handle of the file is short (its staged file has no reservation to tell)
                self._short_file(fh, failed=exc.errno not in (errno.ENOSPC, errno.EDQUOT))
            raise
        if fh in self._syncs or (sync and fh in self._direct):
            self.fsync(fh)
        return n

    def _short_file(self, fh: int, *, failed: bool = False) -> None:
        """A WRITE from the kernel's write-back cache found no space (the quota, a full
        device): every writable handle of its file is made short and the WRITE is answered
        as done, its bytes dropped. Why: refused, the kernel would keep the error for the
        close, which then returns it without a FLUSH (fs/fuse/file.c ``fuse_flush``), so the
        file would be reverted only by the RELEASE, after ``close()`` returned: a reader right
        after it saw the file missing or half-written. Answered, the close's FLUSH reverts the
        file before it returns ENOSPC (``flush``), as on the daemon path. Every handle, since
        the kernel picks the WRITE's handle among the file's writable ones: whichever closes
        first reports it, and none open then can commit the dropped range as written.

        ``failed``: the WRITE failed for another reason (EIO, e.g. the chunk it falls into
        could not be read from the shared tier) and is refused: the kernel reports that error
        once (to the fsync or close that wrote the page back, or to any close of the file)
        and keeps the page clean, never sending it again. So the handles are made short too:
        a later fsync or close is refused (StorageError) and the close reverts the file.
        Before (review15wb), a retried fsync, or the close after a failed fsync, returned 0
        and committed the file without the page."""
        file_id = self._handles[fh][1].file_id
        with self._lock:
            for other, (_, handle) in self._handles.items():
                if handle.file_id == file_id and other not in self._readers:
                    self._short.add(other)
                    if failed:
                        self._failed.add(other)

    def _dropped_beside(self, fh: int) -> bool:
        """With the kernel's write-back cache: whether another handle of ``fh``'s file was made
        short by a dropped WRITE (``_short_file``) and its close has not reverted the file yet.
        The file then holds a hole where the dropped pages were, which no close or fsync may
        commit: a reader's close commits nothing and its fsync is refused; a handle opened for
        writing since is refused as every writable one was. Why (review15wb): the reader's
        close wrote the pages back (the drop), then committed the half-written file; the
        writer's ENOSPC close then "reverted" to that commit, which stayed.

        With WRITEs answered in C too (``c_writes_on``): a shared mapping's cached WRITEs
        go to Python, and one that fails there (a hole of the unreserved staged file on a
        full disk) is recorded by nobody the C table asks, so a writable handle opened after
        it committed the file without the dropped pages at its close, which returned 0, and
        the mapper's revert went back to that (review19d)."""
        if not self.kernel_cache and self.cwrites is None:
            return False
        with self._lock:
            if not self._short:  # the common case, without a walk of every open handle at each close
                return False
            entry = self._handles.get(fh)
            if entry is None:
                return False
            file_id = entry[1].file_id
            return any(
                other in self._short and other not in self._reverted and handle.file_id == file_id
                for other, (_, handle) in self._handles.items()
                if other != fh
            )

    def _write(self, fh: int, offset: int, data: bytes, *, short: bool) -> int:
        """``short``: a staged file's ``pwrite`` cut short answers the count written (the
        caller's ``write(2)``: ``StagedFile.write``), as WRITEs answered in C do."""
        ino, handle = self._handles[fh]
        staged = handle.staged_fd >= 0  # charged at flush, like the kernel's writes to it
        growth = (
            self._charge_write(fh, ino, offset, len(data)) if self.quota is not None and not staged else 0
        )
        try:
            n = handle.write(offset, data, short=short)
        except BaseException:
            self._changed(fh)
            self._refund(growth)
            with self._lock:
                if ino in self._nameless:
                    self._nameless[ino] -= growth
            raise
        self._changed(fh)
        with self._lock:
            self._dirty.add(fh)
            last = self._last.get(ino)
            if last is not None and offset + n > last.size:
                self._last[ino] = Stat(
                    ino, last.mode, last.nlink, offset + n, last.mtime_ns, last.uid, last.gid
                )
        return n

    def _charge_write(self, fh: int, ino: int, offset: int, length: int) -> int:
        """Charge the bytes a write adds past the end of the file; the whole write or nothing."""
        assert self.quota is not None
        with self._lock:  # one writer at a time grows a file's known size and the usage together
            last = self._last.get(ino)
            size = last.size if last is not None else 0
            growth = max(0, offset + length - size)
            try:
                self.quota.charge(growth, self._label(ino))
            except NoSpace:
                self._short.add(fh)
                raise
            if ino in self._nameless:
                self._nameless[ino] += growth
            if last is not None and growth:
                self._last[ino] = Stat(
                    ino, last.mode, last.nlink, size + growth, last.mtime_ns, last.uid, last.gid
                )
        return growth

    def _check_short(self, fh: int) -> None:
        self._absorb(fh)
        if fh in self._failed or (fh in self._readers and self._c_torn(fh)):
            ino = self._handles[fh][0]
            raise StorageError(
                f"inode {ino} of workspace {self.ws.name!r}: a write of this file failed (a write-back of "
                "its cached pages, or a WRITE answered in C; the first error said why); the file is incomplete and goes back to its last "
                "fsync or close when closed (nothing half-written is committed)"
            )
        if fh in self._short or self._dropped_beside(fh):
            ino = self._handles[fh][0]
            raise NoSpace(
                f"inode {ino} of workspace {self.ws.name!r}: an earlier write or close of this handle ran "
                "out of space (the quota, or a full shared-tier, journal or staging disk: the first "
                "error said which); the file is incomplete and goes back to its last fsync or close "
                "when closed (nothing half-written is committed)"
            )

    def fsync(self, fh: int) -> None:
        """Durable in the shared tier and journaled dirty when this returns (write-back promise)."""
        self._check_short(fh)
        self._charge_staged(fh)
        with self._lock:  # before the commit: a change counted later may have missed it
            seen = self._changes.get(fh, 0)
        self._handles[fh][1].fsync()
        self._check_short(fh)  # a revert for another handle ran meanwhile (``_refuse_dropped``)
        with self._lock:
            # only if no write or truncate came through ``fh`` during the commit (wbreview44):
            # one that did is not in it, and a revert to it drops that write, which
            # ``_refuse_dropped`` must then refuse at ``fh``'s close, not let it return 0
            if self._changes.get(fh, 0) == seen:
                self._dirty.discard(fh)
            self._closed_at[fh] = seen

    def _changed(self, fh: int) -> None:
        """Count a WRITE or truncate through ``fh`` once it changed the file (or failed)."""
        with self._lock:
            self._changes[fh] = self._changes.get(fh, 0) + 1

    def _changed_since_close(self, fh: int, handle, staged: _Staged | None) -> bool:
        """Whether ``fh``'s RELEASE must commit its file: this handle may have changed it since
        its last successful fsync or close (caller holds ``_lock``, ``fh`` still registered).

        Why (review19d): the kernel sends RELEASE after close(2) returned (asynchronously; for
        a mapped file only at munmap), when that close's FLUSH already committed the file. A
        commit then took the shared open file as it was, with another handle's unacknowledged
        writes (an O_TRUNC rewrite) in it, and when that handle's write later failed its revert
        went back to the RELEASE's commit: the acknowledged file was gone. Only what came
        through this handle since its close is its own to commit: a mapping's write-back pages
        or cached WRITEs the kernel sent with it (counted in ``_write``; those it sent with
        another handle are that handle's). Conservatively True where the daemon cannot count:
        a handle never closed successfully (``release_all`` at unmount), and a staged file with a
        backing file (``--passthrough``: the kernel writes it, the daemon never sees which
        handle did). A handle whose WRITEs the C table still answers (``_published``) is
        committed too (``release``): the table keeps no count per handle; ``flush`` takes a
        handle out of it before its commit, so what it writes after is counted here.

        A staged file with a backing file that another handle holds open is that handle's to
        commit or refuse (review20a): the RELEASE after a successful close comes with no write of
        its own since, as every write through an open file description is followed by a close of
        one of its descriptors, whose FLUSH commits it (a mapping holds the backing file, not this
        one, so no munmap sends a RELEASE here); what the file holds now may be the other handle's
        unacknowledged rewrite, which a commit here would make the file's acknowledged state."""
        if fh not in self._closed_at or self._closed_at[fh] != self._changes.get(fh, 0):
            return True
        return (
            handle.staged_fd >= 0
            and (self.backing is not None or (staged is not None and staged.backing_id != 0))
            and not handle.shared
        )

    def flush_is_done(self, fh: int) -> bool:
        """Whether a FLUSH of ``fh`` has nothing to commit (no quota failure, not staged, the
        file durable and journaled as it is): answered without a worker-thread hop."""
        entry = self._handles.get(fh)
        if entry is None or fh in self._short:
            return False
        if fh in self._readers:
            return True  # a reader's close commits nothing (``flush``)
        with self._lock:
            seen = self._changes.get(fh, 0)
        if not entry[1].committed_now():
            return False
        with self._lock:  # a close that committed nothing new is a close all the same (``release``)
            self._closed_at[fh] = seen
        return True

    def flush(self, fh: int) -> None:
        """A close(2): like fsync, but a file that ran out of space goes back to its last
        acknowledged state (its last successful fsync or close; removed if it has none), so
        the close reports ENOSPC with the file already reverted, and that is final: what it
        held unacknowledged is never committed, neither half-written nor later (when a retry
        at release or at unmount would succeed).

        Out of space means a write past the quota, or a full shared-tier, journal or staging
        device at this close (NoSpace). Any other failure (EIO) at the commit leaves the file
        as it was for a retry; with the kernel's write-back cache, a WRITE that failed made the
        handle short (``_short_file``): its close is refused and reverts. Every later close of a short handle (a dup of the descriptor) is refused too,
        and reverts again if no other handle has the file open (``_again``).

        A reader's close (an ``O_RDONLY`` handle) commits nothing: it wrote nothing (the
        kernel sends WRITEs with writable handles only), so what the shared open file holds
        is its writers' to acknowledge or refuse at their own closes, as a reader's close(2)
        flushes nothing on a local file system or NFS. Why (review31): ``md5sum`` or ``tail``
        closing while a writer was mid-file made the writer's half-written bytes an
        acknowledged generation: the next ``datahub commit`` put them in a version, a kill -9
        brought them back in place of the file's last acknowledged content, and the writer's
        close refused for space "reverted" to them. An fsync of a reader still commits the
        file (``fsync``), as fsync(2) of a read-only descriptor does on Linux.
        """
        if fh in self._readers:
            return  # the writers' closes acknowledge, refuse or report a drop
        self._absorb(fh)
        if fh in self._published and fh not in self._short:
            # out of the C table before the commit (a write of it in progress ends first): its
            # later WRITEs (through a dup of the descriptor) go to Python, which counts them,
            # so its RELEASE commits only if one came (``_changed_since_close``, review19d)
            self._retract(fh)
        if fh not in self._short:
            try:
                self.fsync(fh)
                return
            except NoSpace:
                self._short.add(fh)
                self._revert_of(fh)
                raise
        self._revert_of(fh)
        self.fsync(fh)

    def _revert_of(self, fh: int) -> None:
        """Revert the file of a short handle whose close is refused now, unless a close of it
        reverted it already and another handle shares the file (``_again``)."""
        ino, handle = self._handles[fh]
        if self._again(fh in self._reverted, handle):
            self._revert(ino, handle)
            self._reverted.add(fh)

    @staticmethod
    def _again(reverted: bool, handle) -> bool:
        """Whether a refused close (or the release after one) of a short handle reverts its
        file: always the first time; again only if no other handle has the file open.

        Why (dupfd13): one handle is one open file description, so a ``dup(2)`` of the
        descriptor whose close was refused (or one a child inherited) still writes through
        it, and each of its later closes is refused too; what it wrote since the revert must
        not be committed then, nor at the release. Alone, a revert drops it. With another
        handle open, a revert would drop that handle's unsaved writes while its close
        returns 0 (d3c5a43); the file is left to that close instead."""
        return not reverted or not handle.shared

    def releases_now(self, fh: int) -> bool:
        """Whether a RELEASE of ``fh`` would do no I/O and wait for nothing (not staged, no
        quota failure, ``FileHandle.releases_now``): answered without a worker-thread hop.
        The kernel sends RELEASE only after every WRITE of that file's writeback (a shared
        mapping's pages) has been answered (fs/fuse/file.c, ``fuse_file_release``), and a
        write answered later would make this False anyway."""
        entry = self._handles.get(fh)
        if entry is None or fh in self._short:
            return False
        handle = entry[1]
        return handle.staged_fd < 0 and handle.releases_now()

    def release(self, fh: int) -> None:
        published = fh in self._published  # before ``_retract`` takes it out of the C table
        self._retract(fh)
        reader = fh in self._readers  # commits nothing, at its close or here (``flush``)
        with self._lock:
            ino, handle = self._handles[fh]
            staged = self._staged.get(ino) if handle.staged_fd >= 0 else None  # its file is open: its own
            changed = published or self._changed_since_close(fh, handle, staged)
            del self._handles[fh]
            self._changes.pop(fh, None)
            self._closed_at.pop(fh, None)
            short, reverted = fh in self._short, fh in self._reverted
            self._short.discard(fh)
            self._failed.discard(fh)
            self._reverted.discard(fh)
            self._dirty.discard(fh)
            self._readers.discard(fh)
            self._syncs.discard(fh)
            self._direct.discard(fh)
        commit = not reader and changed  # a close committed it: the file's later changes are others'
        try:
            if short:  # a RELEASE after a refused FLUSH commits nothing new (``_again``)
                if self._again(reverted, handle):  # the close below must not save it
                    commit = self._revert_at_release(ino, handle) and commit
                else:  # another handle's close commits or refuses the file
                    commit = False
            elif staged is not None and self.quota is not None and not reader:
                # a reader's release charges nothing: what writers added is charged (or
                # refused) at their closes, or gone with the file's last handle
                self._handles[fh] = (ino, handle)  # charged like a flush, but a release cannot fail
                try:
                    self._charge_staged(fh, force=True)
                finally:
                    del self._handles[fh]
            try:
                handle.close(commit=commit)
            except (DatahubError, OSError) as exc:  # a RELEASE lets its handle go (``_uncommitted``)
                if not commit or handle.released:  # not its commit that failed
                    raise
                self._uncommitted(ino, handle, exc)
            if handle.lingering:
                log.info(
                    "workspace %r: %r is still mapped after its last close: committed again when unmapped",
                    self.ws.name, handle.path,
                )  # fmt: skip
        finally:
            refund = 0
            with self._lock:  # one hold: an unlink (``_name_went``) sees the file staged and open, or neither
                dropped = self._unstage(ino, staged)
                if dropped is not None and ino in self._nameless:  # its charge, now its record went
                    self._nameless[ino] += dropped.charged
                node = self._inodes.get(ino)
                if node is not None:
                    node.opened -= 1
                    if node.opened <= 0:
                        self._last.pop(ino, None)
                        if ino in self._nameless:  # its last close: its bytes are gone
                            refund, self._nameless[ino] = self._nameless[ino], 0
                    self._maybe_drop(ino, node)
            if dropped is not None:
                self._close_backing(dropped)
            self._refund(refund)

    def _uncommitted(self, ino: int, handle, exc: DatahubError | OSError) -> None:
        """A RELEASE whose own commit failed (the shared tier down or full, the journal's
        device full): what the handle wrote since its last successful close was acknowledged
        by nothing, so the file goes back to its last acknowledged state (``_revert``) unless
        another handle holds it (then it is that handle's to commit or refuse, as ``_again``
        says), and the handle is closed without a commit.

        Why (wbrelease74): the failed commit raised out of ``release`` before the handle's
        close, so the mount kept the open file (and its staged file) until the unmount: every
        later open read bytes whose close had returned EIO (written through a dup after a
        successful close, or through a mapping), and the next close of another handle
        returned 0 and committed them (``tests/fuse/test_wbrelease74_release.py``). A revert
        that fails too leaves a staged file ``unrestored``, which no commit takes, and its
        last close lets it go (``_revert_at_release``)."""
        if not handle.shared:
            self._revert_at_release(ino, handle)
        handle.close(commit=False)
        why = exc.message if isinstance(exc, DatahubError) else str(exc)
        log.warning(  # once it is done: a test waits for it
            "workspace %r: %r could not be committed at its release (%s): its handle was released "
            "without a commit, the file as its last successful fsync or close left it",
            self.ws.name, handle.path, why,
        )  # fmt: skip

    def _revert_at_release(self, ino: int, handle) -> bool:
        """``_revert`` for a RELEASE; False if it failed, and the RELEASE then closes the
        handle without a commit: a staged file whose acknowledged bytes could not be written
        back (no room, or its chunks unreadable while the shared tier is down) is left
        ``unrestored`` (``StagedFile._restore``), which no commit takes.

        Why: the RELEASE must let its handle go whatever the revert met. Raised, the error
        skipped the handle's close, so the open file and its half-restored staged file stayed
        until the unmount, and every later open read them: an acknowledged file read as
        zeros past what the failed write had left, while the disk was full and after space
        came back (``tests/fuse/test_wrongbytes74_unrestored.py``), or after the shared tier
        came back (``tests/fuse/test_wrongbytes74_restore_outage.py``). Closed everywhere, the
        staged file goes and the next open reads the journal's record."""
        try:
            self._revert(ino, handle)
        except (DatahubError, OSError) as exc:
            why = exc.message if isinstance(exc, DatahubError) else str(exc)
            log.warning("workspace %r: %s; its handle is released without a commit", self.ws.name, why)
            return False
        return True

    def _revert(self, ino: int, handle) -> None:
        """Put the file of ``handle`` (``ino``), which ran out of space, back to its last
        acknowledged state (``Workspace.revert``), so no commit takes it half-written. It is
        reverted by its file id, never by the path this view knew: a rename may have put
        another file there, whose unsaved writes that revert would drop (review13). Its
        path gets a new inode at its next lookup, so the kernel caches nothing of the
        dropped changes; a file with no name left (unlinked or replaced) changes no quota
        count here: it keeps its charge until its last close refunds it (``_nameless``)."""
        with self._lock:
            node = self._inodes.get(ino)
            path = node.path if node is not None else None
            staged = self._staged.get(ino)
            charged = staged.charged if staged is not None else None
        if self.quota is not None and charged is None:
            charged = handle.size()
        self._refuse_dropped(handle)  # before: an fsync racing the revert sees it after its commit
        try:
            gone = self.ws.revert(path or "", file_id=handle.file_id)
        except NotFound:
            return
        except (DatahubError, OSError):
            self._recount_failed(ino, handle, charged)
            raise
        if gone is None:
            return
        self._recount(ino, charged, 0 if gone else handle.size())
        with self._lock:  # the name this view knows for ``ino``, if it still names it
            node = self._inodes.get(ino)
            path = node.path if node is not None else None
            if path is None or self._by_path.get(path) != ino:
                return
            del self._by_path[path]
            node.path = None
            parent, _, name = path.rpartition("/")
            parent_ino = self._by_path.get(parent)
        if parent_ino is not None:
            self.forget_entry(parent_ino, name)

    def _recount(self, ino: int, charged: int | None, kept: int) -> None:
        """After a revert of ``ino``: the quota counts ``kept`` bytes for it, no longer
        ``charged`` (what it was charged before the revert)."""
        if self.quota is None:
            return
        self._refund(charged or 0)
        with self._lock:
            self.quota.force(kept)  # what was acknowledged stays, even past a lower limit
            staged = self._staged.get(ino)
            if staged is not None:
                staged.charged = kept

    def _recount_failed(self, ino: int, handle, charged: int | None) -> None:
        """After a revert of ``ino`` that raised: the quota counts what the file holds now.

        Why (wbrelease74): a staged file's revert cuts it to its acknowledged size before it
        writes the acknowledged bytes back (``StagedFile._restore``); when that fails (no
        room, the shared tier down) the file is ``unrestored`` and, once closed everywhere,
        reads as the journal's record, of that size. The raise skipped the quota's step, so
        the quota stayed charged with the failed write's bytes, which no file held any more:
        ``df`` showed them used and later writes within the quota were refused with ENOSPC;
        or, when the failed write left less than the file acknowledged, the workspace held
        that much past its quota (``tests/fuse/test_wbrelease74_quota.py``). A file with no
        name left keeps its charge until its last close, as after a revert that succeeds
        (``_revert``)."""
        if self.quota is None:
            return
        with self._lock:
            if ino in self._nameless:
                return
        try:
            kept = handle.size()
        except (DatahubError, OSError):
            return  # unknown: the charge stays as it was
        self._recount(ino, charged, kept)

    def _refuse_dropped(self, handle) -> None:
        """After a revert of ``handle``'s file: every other handle of that file that wrote
        since its own last successful fsync or close is made short, so its close reports
        ENOSPC. Why: the revert dropped every change of the open file since its last
        acknowledgement, that handle's too; its close used to return 0 with its bytes gone
        (review13c). Marked before the revert, and ``fsync`` looks again after its commit,
        so a close racing the revert is refused too. Conservative: bytes another handle's
        fsync (or that racing close) acknowledged are kept by the revert, and that close is
        refused all the same.

        A handle with a backing file (``--passthrough``) is written by the kernel, which
        never says which handle wrote, so every other such handle of the file opened for
        writing is made short (an ``O_RDONLY`` one cannot have written): before, a staged writer's close returned 0 after the revert had
        put its file back without its bytes (review14wb)."""
        with self._lock:
            for fh, (ino, other) in self._handles.items():
                if other is handle or other.file_id != handle.file_id:
                    continue
                staged = self._staged.get(ino)
                if fh in self._readers:
                    continue
                if fh in self._dirty or self.kernel_cache or fh in self._published:
                    self._short.add(fh)  # WRITEs answered in C: Python never saw which handle wrote
                elif staged is not None and staged.backing_id:
                    self._short.add(fh)

    def release_all(self) -> None:
        """At unmount: close what the kernel did not release (each close is durable)."""
        for fh in list(self._handles):
            self.release(fh)


def raise_descriptor_limit(what: str) -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit: each open staged file holds one
    descriptor in the daemon (often 1,024 by default, against a hard limit of 500,000 or
    more), and a file that finds too few left goes through the daemon instead
    (``Staging.spare_fd``), which is slower, never wrong. Once, when passthrough is agreed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or (hard != resource.RLIM_INFINITY and soft >= hard):
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("%s: cannot raise the descriptor limit from %d to %s: %s", what, soft, hard, exc)
        return
    log.info("%s: descriptor limit (RLIMIT_NOFILE) raised from %d to %s for staged files", what, soft, hard)


def owner_only(*, allow_other: bool, uid: int, gid: int) -> bool:
    """True when the kernel's mode checks (``default_permissions``) are redundant on a
    writable mount whose files are 0644 and directories 0755, and why that holds.

    Without ``allow_other`` the kernel lets in only processes whose uid and gid are the
    mounter's (fs/fuse/dir.c, ``fuse_allow_current_process``); if every entry is shown as
    owned by that uid and gid, the owner bits (rw- files, rwx directories) grant whatever
    they may ask. What the kernel checks without the option stays: exec of a regular file
    (a 0644 file never runs); ``access(2)`` and ``chdir`` ask the daemon (FUSE_ACCESS:
    ``WorkspaceOps.access`` answers as the owner bits would, X_OK from the mode). With
    ``allow_other`` or another uid/gid shown, the option stays.
    """
    return not allow_other and uid == os.getuid() and gid == os.getgid()


def shown_to_others(*, allow_other: bool, uid: int, gid: int) -> bool:
    """True when every local account may enter the mount and its files are shown as the
    mounter's own: there a ``chmod`` that would hide a file from the others is refused
    (``WorkspaceOps._keep_mode``), since they go on reading it 0644.

    A mount shown as another account's (``--uid``/``--gid``) is one made for that account:
    the CSI plugin's for a pod, whose target no other account of the node reaches (the
    kubelet's directories), and where a refused chmod would only fail the pod's copies of
    0600 files (``shutil.copy2``, ``cp -p``)."""
    return allow_other and uid == os.getuid() and gid == os.getgid()
