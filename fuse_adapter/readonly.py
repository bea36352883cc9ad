"""The read-only file system core: stat, lookup, readdir, open and read over a ListingTree.

No pyfuse3 here (``fuse_ops`` is the thin shim): everything is plain Python, tested
without a mount. Methods that may block (waiting for an incremental listing, reading
bytes) say so; the shim runs them in worker threads. Errors are ``datahub.errors`` types;
the shim turns them into errno once.
"""

from __future__ import annotations

import itertools
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from datahub.errors import InvalidInput, NotFound, ReadOnly
from datahub.storage.base import ObjectRef
from fuse_adapter.hints import PREFIX as HINT_PREFIX
from fuse_adapter.hints import HintAssembler
from fuse_adapter.source import ByteSource
from fuse_adapter.tree import DIR, FILE, ROOT_INODE, SYMLINK, ListingTree

log = logging.getLogger(__name__)

BLOCK = 512
IO_SIZE = 1024 * 1024  # st_blksize: buffered readers use it as their read size
VIRTUAL_BASE = 1 << 62  # inode numbers of generated files, far above the tree's
#: refs of files handed to pyfuse3's C tables kept for their hits: twice what the two tables
#: hold at most (4,096 each: fuse_adapter.passthrough, fuse_adapter.fastread)
HELD_REFS = 16384
FILE_MODE, DIR_MODE, LINK_MODE = stat.S_IFREG | 0o444, stat.S_IFDIR | 0o555, stat.S_IFLNK | 0o777


@dataclass(frozen=True, slots=True)
class Stat:
    ino: int
    mode: int
    nlink: int
    size: int
    mtime_ns: int
    uid: int
    gid: int


@dataclass(frozen=True, slots=True)
class _Handle:
    ino: int
    ref: ObjectRef | None  # None for a virtual file
    frozen: bytes = b""  # a virtual file's content, fixed at open


class ReadOnlyView:
    """An immutable namespace: the tree for names and attributes, a ByteSource for bytes.

    The view holds no read policy: each read goes to the source with its offset, size and
    the open handle's identity, and the source (the cache's prefetcher) alone decides what
    to read ahead (docs/cache.md "Read-ahead").
    """

    def __init__(
        self,
        tree: ListingTree,
        source: ByteSource,
        *,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        self.tree = tree
        self.source = source
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self._lock = threading.Lock()
        self._handles: dict[int, _Handle] = {}
        self._next_fh = itertools.count(1)
        self._virtual: dict[int, Callable[[], bytes]] = {}
        self._virtual_names: dict[str, int] = {}
        self._virtual_seen: dict[int, tuple[bytes, int]] = {}  # ino -> (content, mtime) last reported
        self._hints = HintAssembler()
        #: ino -> ref of files whose page file was handed out (:meth:`backing_fd`): the files
        #: pyfuse3's C tables hold, whose hits :meth:`backing_hits` reports (bounded, oldest out)
        self._held_refs: OrderedDict[int, ObjectRef] = OrderedDict()
        self._held_lock = threading.Lock()
        #: called with the number of files of each complete hint window (``.datahub`` counts them)
        self.on_hint: Callable[[int], None] | None = None

    # --- virtual files (e.g. ``.datahub``: which snapshot this is) -------------------------------
    def add_virtual_file(self, name: str, content: Callable[[], bytes]) -> int:
        """A generated file in the mount root: found by name, not listed; it shadows an object
        of the same name."""
        ino = VIRTUAL_BASE + len(self._virtual_names)
        self._virtual_names[name] = ino
        self._virtual[ino] = content
        return ino

    def is_virtual(self, ino: int) -> bool:
        return ino in self._virtual

    # --- read-order hints (fuse_adapter.hints) --------------------------------------------------------
    @staticmethod
    def is_hint(name: str) -> bool:
        return name.startswith(HINT_PREFIX)

    def hint(self, name: str) -> int:
        """Take one hint name; when its window is complete, tell the source. Returns the
        number of files hinted now (0 while parts are missing; unknown inodes are skipped)."""
        inodes = self._hints.add(name)
        if not inodes:
            return 0
        refs = []
        for ino in inodes:
            if self.tree.exists(ino) and self.tree.attr(ino).kind == FILE:
                refs.append(self.tree.ref(ino))
        if refs:
            self.source.hint(refs)
        if self.on_hint is not None:
            self.on_hint(len(refs))
        return len(refs)

    # --- names and attributes ----------------------------------------------------------------------
    def lookup_now(self, parent: int, name: str) -> int | None | object:
        """Inode, None (absent) or ``...`` (the listing has not got there yet: use :meth:`lookup`)."""
        if parent == ROOT_INODE and name in self._virtual_names:
            return self._virtual_names[name]
        return self.tree.lookup_now(parent, name)

    def lookup(self, parent: int, name: str) -> int:
        """Blocking lookup (waits for an incremental listing); NotFound if absent."""
        ino = self.lookup_now(parent, name)
        if ino is ...:
            ino = self.tree.lookup(parent, name)
        if ino is None:
            raise NotFound(f"no entry {name!r} in this read-only view")
        return ino  # type: ignore[return-value]

    def getattr(self, ino: int) -> Stat:
        if ino in self._virtual:
            content, mtime = self._observe_virtual(ino)
            return Stat(ino, FILE_MODE, 1, len(content), mtime, self.uid, self.gid)
        if not self.tree.exists(ino):
            raise NotFound(f"no inode {ino}")
        a = self.tree.attr(ino)
        if a.kind == DIR:
            mode, nlink = DIR_MODE, 2
        elif a.kind == FILE:
            mode, nlink = FILE_MODE, 1
        else:
            mode, nlink = LINK_MODE, 1
        return Stat(ino, mode, nlink, a.size, a.mtime_ns, self.uid, self.gid)

    def _observe_virtual(self, ino: int) -> tuple[bytes, int]:
        """The content of a virtual file now, with an mtime that moves whenever it changes.

        The kernel may cache a virtual file's pages (zero-message opens keep the cache), and
        drops them when a fresh stat shows another size or mtime; reads then serve this same
        content, so they always agree with the size the kernel was told.
        """
        content = self._virtual[ino]()
        with self._lock:
            seen = self._virtual_seen.get(ino)
            if seen is None or seen[0] != content:
                mtime = (
                    self.tree.attr(ROOT_INODE).mtime_ns if seen is None else max(time.time_ns(), seen[1] + 1)
                )
                seen = self._virtual_seen[ino] = (content, mtime)
        return seen

    def readlink(self, ino: int) -> str:
        if ino in self._virtual or self.tree.attr(ino).kind != SYMLINK:
            raise InvalidInput(f"inode {ino} is not a symbolic link")
        return self.tree.readlink(ino)

    def readdir(self, ino: int, start: int, *, wait: bool) -> list[tuple[str, int, int]]:
        """(name, inode, next offset) from offset ``start``; see ListingTree.readdir.

        Virtual files are not listed (like a ``.snapshot`` directory): a listing of a
        bucket mount equals the bucket's, and ``cat MNT/.datahub`` still works. An answer
        that held only such names asks the tree again past them: an empty answer ends the
        directory for the kernel, and while a bucket's root is still being listed the
        bucket's own ``.datahub`` could be its only final entry (review73: ``ls`` of the
        mount showed nothing).
        """
        if not self.tree.is_dir(ino):
            raise InvalidInput(f"inode {ino} is not a directory")
        entries = self.tree.readdir(ino, start, wait=wait)
        if ino != ROOT_INODE or not self._virtual_names:
            return entries
        while entries:
            shown = [e for e in entries if e[0] not in self._virtual_names]
            if shown:
                return shown
            entries = self.tree.readdir(ino, entries[-1][2], wait=wait)
        return []

    def dir_complete(self, ino: int) -> bool:
        return self.tree.dir_complete(ino)

    # --- contents --------------------------------------------------------------------------------
    def open(self, ino: int, *, write: bool = False) -> int:
        if write:
            raise ReadOnly("this mount is a read-only dataset version: write to a workspace instead")
        frozen = b""
        if ino in self._virtual:
            ref, frozen = None, self._virtual[ino]()  # one consistent content per open
        else:
            if self.tree.attr(ino).kind != FILE:
                raise InvalidInput(f"inode {ino} is not a regular file")
            ref = self.tree.ref(ino)
        fh = next(self._next_fh)
        with self._lock:
            self._handles[fh] = _Handle(ino, ref, frozen)
        return fh

    def read(self, fh: int, offset: int, size: int) -> bytes | memoryview:
        """Blocking: bytes of the open file (the source reads ahead for this handle)."""
        h = self._handles[fh]
        if h.ref is None:
            return h.frozen[offset : offset + size]
        end = min(h.ref.size, offset + size)
        if offset >= end:
            return b""
        return self.source.read(h.ref, offset, end - offset, reader=fh)

    def read_inode(self, ino: int, offset: int, size: int) -> bytes | memoryview:
        """Blocking: bytes of a file named by inode, for files the kernel opened without asking.

        With zero-message opens (the shim answers OPEN with ENOSYS once, and the kernel then
        opens every file itself, keeping its page cache) reads carry no handle of ours: the
        source then tells readers apart by object only.
        """
        if ino in self._virtual:
            seen = self._virtual_seen.get(ino) or self._observe_virtual(ino)
            return seen[0][offset : offset + size]
        ref = self.tree.ref(ino)
        end = min(ref.size, offset + size)
        if offset >= end:
            return b""
        return self.source.read(ref, offset, end - offset)

    def read_inode_now(self, ino: int, offset: int, size: int) -> bytes | memoryview | None:
        """``read_inode`` if the bytes are at hand without I/O (the cache's RAM), else None."""
        if ino in self._virtual:
            return None
        ref = self.tree.ref(ino)
        if offset >= ref.size:
            return b""
        return self.source.read_cached(ref, offset, min(size, ref.size - offset))

    def backing_fd(self, ino: int, *, verify: bool = True, fetch: bool = False) -> int | None:
        """Blocking: a descriptor of a local file holding exactly this file's verified bytes
        (for a FUSE passthrough open; the caller closes it), or None (read through us).
        ``verify=False``: metadata only (a file verified before), -1 if it needs reading,
        -2 if the cache does not hold it; ``fetch=True``: read it in first (a cold file)."""
        if ino in self._virtual or self.tree.attr(ino).kind != FILE:
            return None
        backing = getattr(self.source, "backing_fd", None)
        if backing is None:
            return None
        ref = self.tree.ref(ino)
        fd = backing(ref, verify=verify, fetch=fetch)
        if fd is not None and fd >= 0:
            self._hold_ref(ino, ref)
        return fd

    def _hold_ref(self, ino: int, ref: ObjectRef) -> None:
        """Remember the ref of a file handed to the C tables: its hits are folded every second
        (:meth:`backing_hits`), and the tree's ``ref`` builds URL and etag strings anew each
        time (hashed anew by the cache), most of a fold's Python per hit."""
        with self._held_lock:
            held = self._held_refs
            held[ino] = ref
            held.move_to_end(ino)
            while len(held) > HELD_REFS:
                held.popitem(last=False)

    def backing_hits(self, inos: list[int]) -> None:
        """Opens of these files were answered without the daemon (pyfuse3's C code): the
        cache counts a hit of each, so eviction and warm-up see the files in use. One call
        for a second's worth (thousands in an epoch). An inode gone meanwhile is skipped."""
        hits = getattr(self.source, "backing_hits", None)
        if hits is None:
            return
        with self._held_lock:
            got = self._held_refs.get
            refs = [got(ino) for ino in inos]
        for i, ref in enumerate(refs):
            if ref is not None:
                continue
            ino = inos[i]
            if ino in self._virtual:
                continue
            try:
                refs[i] = self.tree.ref(ino)
            except Exception as exc:  # forgotten, or its listing failed: one hit not counted
                log.debug("counting a hit of inode %d: %s", ino, exc)
        refs = [ref for ref in refs if ref is not None]
        if refs:
            hits(refs)

    def backing_unchanged(self, ino: int, fd: int) -> bool:
        """Whether ``fd`` (from :meth:`backing_fd`) is still in the state it was verified in:
        one ``fstat``, no data read, so the FUSE loop may ask inline."""
        unchanged = getattr(self.source, "backing_unchanged", None)
        if unchanged is None or ino in self._virtual or self.tree.attr(ino).kind != FILE:
            return False
        return unchanged(self.tree.ref(ino), fd)

    def backing_check(self, ino: int, fd: int) -> bool:
        """Blocking: whether ``fd`` (a backing file handed to the kernel before, which has
        changed since, e.g. was evicted) still holds exactly this file's verified bytes."""
        check = getattr(self.source, "backing_check", None)
        if check is None or ino in self._virtual or self.tree.attr(ino).kind != FILE:
            return False
        return check(self.tree.ref(ino), fd)

    def release(self, fh: int) -> None:
        with self._lock:
            self._handles.pop(fh, None)

    def open_handles(self) -> int:
        return len(self._handles)
