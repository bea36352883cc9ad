"""The writable workspace core: FUSE's inode world over the path-based Workspace API.

The write-back Workspace (``datahub.cache.writeback``) speaks paths; the kernel speaks
inode numbers with lookup counts. This module keeps that mapping and nothing else: every
namespace or data operation is one Workspace call, so the write-back promise (a close or
fsync returns only once the bytes are durable in the shared tier and journaled) is the
Workspace's, kept intact. No pyfuse3 here; all methods block and run in worker threads.

Inodes: one per path the kernel knows (looked up, created, listed with readdirplus).
A rename moves the path of the inode and of everything below it. ``forget`` drops an
inode once the kernel has forgotten every lookup and no handle holds it open.
"""

from __future__ import annotations

import itertools
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass

from datahub.errors import AlreadyExists, InvalidInput, NoSpace, NotFound
from datahub.validation import check_new_key
from fuse_adapter.quota import Quota
from fuse_adapter.readonly import Stat
from fuse_adapter.tree import ROOT_INODE


@dataclass(slots=True)
class _Inode:
    path: str | None  # None once unlinked (still open somewhere)
    lookups: int = 0
    opened: int = 0


class WorkspaceView:
    def __init__(
        self, workspace, *, uid: int | None = None, gid: int | None = None, quota: Quota | None = None
    ) -> None:
        self.ws = workspace  # datahub.cache.writeback.Workspace
        self.quota = quota  # None: no limit (fuse_adapter/quota.py)
        self._short: set[int] = set()  # handles a write of which failed on the quota: discarded at close
        # set by the FUSE layer: tell the kernel a name is gone (a discarded file)
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
            if node.path is not None and self._by_path.get(node.path) == ino:
                del self._by_path[node.path]

    def _moved(self, old: str, new: str) -> None:
        with self._lock:
            moved = [(p, i) for p, i in self._by_path.items() if p == old or p.startswith(old + "/")]
            for path, _ in moved:
                del self._by_path[path]
            replaced = self._by_path.pop(new, None)
            if replaced is not None:
                self._inodes[replaced].path = None
            for path, ino in moved:
                newpath = new + path[len(old) :]
                self._by_path[newpath] = ino
                self._inodes[ino].path = newpath

    def _gone(self, path: str) -> None:
        with self._lock:
            ino = self._by_path.pop(path, None)
            if ino is not None:
                self._inodes[ino].path = None

    # --- quota accounting ---------------------------------------------------------------------------
    def _file_size(self, path: str) -> int:
        """Size of the file at ``path`` (0 if there is none, or it is a directory)."""
        try:
            attr = self.ws.stat(path)
        except NotFound:
            return 0
        return 0 if attr.is_dir else attr.size

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
                return Stat(ino, last.mode, 0, last.size, last.mtime_ns, last.uid, last.gid)
        st = self._stat(ino, self.ws.stat(self.path_of(ino)))
        with self._lock:
            if self._inodes.get(ino) is not None and self._inodes[ino].opened:
                self._last[ino] = st
        return st

    def truncate(self, ino: int, size: int, fh: int | None = None) -> Stat:
        return (
            self._charged_truncate(ino, size, fh) if self.quota is not None else self._truncate(ino, size, fh)
        )

    def _truncate(self, ino: int, size: int, fh: int | None = None) -> Stat:
        if fh is not None and fh in self._handles:
            self._handles[fh][1].truncate(size)
            with self._lock:
                last = self._last.get(ino)
                if last is not None:
                    self._last[ino] = Stat(
                        ino, last.mode, last.nlink, size, last.mtime_ns, last.uid, last.gid
                    )
        else:
            self.ws.truncate(self.path_of(ino), size)
        return self.getattr(ino)

    def _charged_truncate(self, ino: int, size: int, fh: int | None) -> Stat:
        assert self.quota is not None
        growth = size - self.getattr(ino).size
        if growth <= 0:  # shrinking frees space once it happened
            st = self._truncate(ino, size, fh)
            self.quota.refund(-growth)
            return st
        self.quota.charge(growth, self.path_of(ino))
        try:
            return self._truncate(ino, size, fh)
        except BaseException:
            self.quota.refund(growth)
            raise

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
        self._refund(size)
        self._gone(path)

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
        self._refund(replaced)
        self._moved(old, new)

    # --- files -----------------------------------------------------------------------------------
    def _register(self, ino: int, handle: object, st: Stat) -> int:
        fh = next(self._next_fh)
        with self._lock:
            self._handles[fh] = (ino, handle)
            self._inodes[ino].opened += 1
            self._last[ino] = st
        return fh

    def create(self, parent: int, name: str, *, exclusive: bool) -> tuple[int, Stat]:
        path = self._new_child(parent, name)
        if exclusive:
            try:
                self.ws.stat(path)
            except NotFound:
                pass
            else:
                raise AlreadyExists(f"{path!r} already exists in workspace {self.ws.name!r}")
        replaced = self._file_size(path) if self.quota is not None else 0
        handle = self.ws.open(path, create=True, truncate=True)
        self._refund(replaced)
        ino = self._remember(path)
        st = self._stat(ino, self.ws.stat(path))
        return self._register(ino, handle, st), st

    def open(self, ino: int, *, truncate: bool) -> int:
        path = self.path_of(ino)
        emptied = self._file_size(path) if self.quota is not None and truncate else 0
        handle = self.ws.open(path, truncate=truncate)
        self._refund(emptied)
        return self._register(ino, handle, self._stat(ino, self.ws.stat(path)))

    def read(self, fh: int, offset: int, size: int) -> bytes:
        return self._handles[fh][1].read(offset, size)

    def write(self, fh: int, offset: int, data: bytes) -> int:
        ino, handle = self._handles[fh]
        growth = self._charge_write(fh, ino, offset, len(data)) if self.quota is not None else 0
        try:
            n = handle.write(offset, data)
        except BaseException:
            self._refund(growth)
            raise
        with self._lock:
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
                self.quota.charge(growth, self._inodes[ino].path or f"inode {ino}")
            except NoSpace:
                self._short.add(fh)
                raise
            if last is not None and growth:
                self._last[ino] = Stat(
                    ino, last.mode, last.nlink, size + growth, last.mtime_ns, last.uid, last.gid
                )
        return growth

    def _check_short(self, fh: int) -> None:
        if fh in self._short:
            ino = self._handles[fh][0]
            raise NoSpace(
                f"inode {ino} of workspace {self.ws.name!r}: a write to this file failed on the quota; "
                "the file is incomplete and is discarded when closed (nothing half-written is committed)"
            )

    def fsync(self, fh: int) -> None:
        """Durable in the shared tier and journaled dirty when this returns (write-back promise)."""
        self._check_short(fh)
        self._handles[fh][1].fsync()

    def flush(self, fh: int) -> None:
        """A close(2): like fsync, but a file that ran out of space is discarded, so the close
        reports ENOSPC with the file already gone, and that is final: it is never committed,
        neither half-written nor later (when a retry at release or at unmount would succeed).

        Out of space means a write past the quota, or a full shared-tier or journal device
        at this close (NoSpace). Any other failure (EIO) leaves the file as it was for a retry.
        """
        if fh not in self._short:
            try:
                self.fsync(fh)
                return
            except NoSpace:
                self._short.add(fh)
                self._discard_of(fh)
                raise
        self._discard_of(fh)
        self.fsync(fh)

    def _discard_of(self, fh: int) -> None:
        ino = self._handles[fh][0]
        with self._lock:
            node = self._inodes.get(ino)
            path = node.path if node is not None else None
        if path is not None:
            self._discard(path)

    def release(self, fh: int) -> None:
        with self._lock:
            ino, handle = self._handles.pop(fh)
            short = fh in self._short
            self._short.discard(fh)
            node = self._inodes.get(ino)
            path = node.path if node is not None else None
        try:
            if short and path is not None:
                self._discard(path)  # first: the close below may succeed now, and must not save it
            handle.close()
        finally:
            with self._lock:
                node = self._inodes.get(ino)
                if node is not None:
                    node.opened -= 1
                    if node.opened <= 0:
                        self._last.pop(ino, None)
                    self._maybe_drop(ino, node)

    def _discard(self, path: str) -> None:
        """Remove a file a write of which failed on the quota, so no commit takes it half-written."""
        size = self._file_size(path)
        try:
            self.ws.unlink(path)
        except NotFound:
            return
        self._refund(size)
        parent, _, name = path.rpartition("/")
        with self._lock:
            parent_ino = self._by_path.get(parent)
        self._gone(path)
        if parent_ino is not None:
            self.forget_entry(parent_ino, name)

    def release_all(self) -> None:
        """At unmount: close what the kernel did not release (each close is durable)."""
        for fh in list(self._handles):
            self.release(fh)
