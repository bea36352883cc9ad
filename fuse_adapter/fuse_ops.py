"""The pyfuse3 shim: the only module that imports pyfuse3 (and trio's FUSE loop).

It adapts the FUSE protocol to two plain-Python cores, and does nothing else:

* :class:`ReadOnlyOps` over ``readonly.ReadOnlyView`` (dataset versions, bucket snapshots);
* :class:`WorkspaceOps` over ``workspace.WorkspaceView`` (a writable write-back workspace).

Rules kept here: the core raises ``datahub.errors`` types and this module turns them into
an errno exactly once (:func:`_errno_of`); anything that may block (the listing loader,
the cache, the workspace journal) runs in a worker thread under a CapacityLimiter, so the
trio event loop only ever does in-memory work and many readers are served in parallel.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable
from functools import wraps
from typing import Any

import pyfuse3
import trio

from datahub.errors import DatahubError
from fuse_adapter.fastread import FastReads
from fuse_adapter.passthrough import PassthroughOpens, fd_state
from fuse_adapter.readonly import IO_SIZE, ReadOnlyView, Stat

log = logging.getLogger(__name__)

RO_TIMEOUT = 24 * 3600.0  # immutable: the kernel may keep entries and attributes for a day
MAX_IO = 1024 * 1024  # max_read / readahead target (the kernel's FUSE limit here is 256 pages)


def _errno_of(exc: BaseException) -> int:
    """The one translation from our error tree (and OS errors) to an errno."""
    if isinstance(exc, pyfuse3.FUSEError):
        return exc.errno
    if isinstance(exc, DatahubError):
        return exc.errno
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    if isinstance(exc, (IsADirectoryError, KeyError)):
        return errno.EBADF
    return errno.EIO


def _fuse_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except (DatahubError, OSError) as exc:
            if not isinstance(exc, DatahubError) or exc.errno not in (errno.ENOENT, errno.EROFS):
                log.warning("%s failed: %s", fn.__name__, exc)
            raise pyfuse3.FUSEError(_errno_of(exc)) from None
        except Exception:
            log.exception("%s failed unexpectedly", fn.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


def _entry(s: Stat, timeout: float) -> pyfuse3.EntryAttributes:
    e = pyfuse3.EntryAttributes()
    e.st_ino = s.ino
    e.generation = 0
    e.entry_timeout = timeout
    e.attr_timeout = timeout
    e.st_mode = s.mode
    e.st_nlink = s.nlink
    e.st_uid = s.uid
    e.st_gid = s.gid
    e.st_rdev = 0
    e.st_size = s.size
    e.st_blksize = IO_SIZE
    e.st_blocks = (s.size + 511) // 512
    e.st_atime_ns = e.st_ctime_ns = e.st_mtime_ns = s.mtime_ns
    return e


class _Ops(pyfuse3.Operations):
    """Both file systems: knows when the kernel's INIT has been answered."""

    def __init__(self) -> None:
        super().__init__()
        self.initialized = trio.Event()

    def init(self) -> None:
        # called inside the INIT request; the reply is sent before trio runs another task
        self.initialized.set()

    # no extended attributes on either file system
    @_fuse_errors
    async def getxattr(self, inode, name, ctx):
        raise pyfuse3.FUSEError(pyfuse3.ENOATTR)

    @_fuse_errors
    async def listxattr(self, inode, ctx):
        return []


#: set by datahub's build of pyfuse3 (third_party/pyfuse3): read() then receives
#: ``inode | NO_OPEN_FH`` for files the kernel opened without asking (zero-message open)
NO_OPEN_FH: int | None = getattr(pyfuse3, "NO_OPEN_FH", None)
#: set by datahub's build of pyfuse3 against libfuse >= 3.16 (third_party/pyfuse3/passthrough.patch)
PASSTHROUGH: bool = bool(getattr(pyfuse3, "PASSTHROUGH", False))
#: set by the same build with fastopen.patch: OPEN and RELEASE of published files answered in C
FASTOPEN: bool = hasattr(pyfuse3, "passthrough_publish")
#: set by the build with fastloop.patch: a C thread reads /dev/fuse and answers those opens,
#: their releases and FUSE_IOCTL without a trio turn
FASTLOOP: bool = bool(getattr(pyfuse3, "FASTLOOP", False))
#: datahub's pyfuse3 (uring.patch) can take requests from one io_uring queue per CPU
URING: bool = bool(getattr(pyfuse3, "URING", False))
#: datahub's pyfuse3 (lookup.patch): its C threads answer LOOKUPs of names published to it
LOOKUP_IN_C: bool = FASTLOOP and hasattr(pyfuse3, "lookup_publish")
#: datahub's pyfuse3 (fastread.h): its C threads answer READs of zero-message-open files
#: from published page files
FASTREAD: bool = FASTLOOP and bool(getattr(pyfuse3, "FASTREAD", False))


def _always(_inode: int) -> bool:
    return True


class _CTable:
    """pyfuse3's C table of published backing files (``fuse_adapter.passthrough.Table``)."""

    def publish(self, ino: int, fd: int) -> int:
        return pyfuse3.passthrough_publish(ino, fd)

    def handle(self, ino: int) -> tuple[int, int] | None:
        return pyfuse3.passthrough_handle(ino)

    def release(self, fh: int) -> bool:
        return pyfuse3.passthrough_release(fh)

    def retract(self, ino: int) -> bool:
        return pyfuse3.passthrough_retract(ino)

    def retract_file(self, st_dev: int, st_ino: int) -> int:
        return pyfuse3.passthrough_retract_file(st_dev, st_ino)

    def handles(self, ino: int) -> int:
        return pyfuse3.passthrough_handles(ino)

    def held_fd(self, ino: int) -> int:
        return pyfuse3.passthrough_held_fd(ino)

    def revalidate(self, ino: int, state: tuple[int, int, int, int]) -> tuple[int, int] | None:
        return pyfuse3.passthrough_revalidate(ino, *state)

    def drain_hits(self) -> list[int]:
        return pyfuse3.passthrough_drain_hits()

    def stats(self) -> dict:
        return pyfuse3.passthrough_stats()


class _FastReadTable:
    """pyfuse3's C table of published page files (``fuse_adapter.fastread.Table``)."""

    def publish(self, ino: int, fd: int) -> None:
        pyfuse3.fastread_publish(ino, fd)

    def retract(self, ino: int) -> bool:
        return pyfuse3.fastread_retract(ino)

    def retract_file(self, st_dev: int, st_ino: int) -> int:
        return pyfuse3.fastread_retract_file(st_dev, st_ino)

    def drain_hits(self) -> list[int]:
        return pyfuse3.fastread_drain_hits()

    def stats(self) -> dict:
        return pyfuse3.fastread_stats() if FASTREAD else {}


class _Backing:
    """pyfuse3's backing-file ioctls (``fuse_adapter.workspace.Backing``)."""

    def open(self, fd: int) -> int:
        return pyfuse3.passthrough_open(fd)

    def close(self, backing_id: int) -> None:
        pyfuse3.passthrough_close(backing_id)


def _file_info(fh: int, backing_id: int, direct: bool) -> pyfuse3.FileInfo:
    """A workspace handle: served by the kernel from its staged file (``backing_id``), or
    through the daemon (``direct``: next to passthrough handles of the same inode)."""
    if backing_id:
        return pyfuse3.FileInfo(fh=fh, backing_id=backing_id)
    return pyfuse3.FileInfo(fh=fh, keep_cache=False, direct_io=direct)


class ReadOnlyOps(_Ops):
    """FUSE requests -> ReadOnlyView. Writes are refused with EROFS (the mount is also ``ro``).

    ``zero_message_open``: answer the first OPEN with ENOSYS, so the kernel stops sending
    OPEN and RELEASE for this mount and opens files itself with their page cache kept. A
    warm epoch then never enters Python: each file open was two round trips into this
    process, which capped warm reads at a quarter of local disk. It needs datahub's pyfuse3
    build (reads must name the inode) and a view without per-handle windows.

    ``passthrough``: answer the OPEN of a file whose object is wholly in the disk tier with
    its verified page file as a FUSE passthrough backing file (``fuse_adapter.passthrough``),
    published to pyfuse3's C table: later opens and releases of it are answered in C, and
    the kernel serves the handles' reads and mmap itself. It needs OPEN, so it replaces
    zero-message opens; when the kernel or the pyfuse3 build cannot do it, the mount falls
    back to zero-message opens (if asked for), logged once. ``fastopen=False`` sends those
    opens and releases to Python instead (a baseline for bench/mount/ssd_hit.py).

    ``fastread`` (with zero-message opens and ``fastloop``; the default read mode): the
    first READ of a file whose object is wholly in the disk tier publishes its verified
    page file to pyfuse3's C table (``fuse_adapter.fastread``); the C threads answer later
    READs of it with a pread, checked by fstat before and after, and drop the page file's
    pages after the reply (one copy in RAM). A warm open then costs no request and an
    SSD-tier hit a READ answered in C (docs/fuse.md, "Reads"). ``False``: READs in Python.

    ``fastloop``: a C thread of pyfuse3 reads the mount's requests and answers those opens,
    releases and the ``isatty()`` ioctl of Python's ``open()`` itself; the others reach
    this class as before. Lone requests then cost no trio turn, which was most of an
    SSD-tier hit's daemon CPU. ``fastloop=False`` keeps pyfuse3's loop (a baseline).

    ``lookup_in_c`` (with ``fastloop``): publish each positive LOOKUP answer of a tree inode
    to pyfuse3's C table, whose threads answer later LOOKUPs of that name (the kernel asks
    again after dropping the dentry); ``False`` is the baseline of bench/mount/ssd_hit.py.

    ``io_uring`` (with ``fastloop``; ``fuse_adapter.uring.mount_transport``: whether to ask,
    and what the stats say otherwise): when the kernel offers FUSE over io_uring at INIT
    (Linux >= 6.14, ``fuse.enable_uring``), requests come from one queue per CPU, each
    served by a C thread pinned to that CPU: a reader's request is answered on its own CPU
    and no other CPU is woken (docs/fuse.md, "Requests over io_uring").
    """

    def __init__(
        self,
        view: ReadOnlyView,
        *,
        threads: int = 32,
        zero_message_open: bool = False,
        passthrough: bool = False,
        fastopen: bool = True,
        fastloop: bool = True,
        fastread: bool = False,
        lookup_in_c: bool = True,
        io_uring: tuple[bool, str] = (False, "/dev/fuse"),
    ) -> None:
        super().__init__()
        self.view = view
        self.limiter = trio.CapacityLimiter(threads)
        self._zero_message_wanted = zero_message_open and NO_OPEN_FH is not None
        self.passthrough = PassthroughOpens(_CTable(), wanted=passthrough and FASTOPEN)
        if passthrough and not FASTOPEN:
            why = "fastopen.patch" if PASSTHROUGH else "libfuse 3.17 (scripts/build_libfuse.sh did not run)"
            self.passthrough.disable(f"pyfuse3 built without {why}")
        self.fastopen = fastopen
        self.fastloop = fastloop and FASTLOOP  # read by serve() before pyfuse3.main()
        self._lookup_in_c = lookup_in_c and self.fastloop and LOOKUP_IN_C
        self.io_uring, self._transport = io_uring[0] and self.fastloop and URING, io_uring[1]
        self.enable_passthrough = self.passthrough.active  # asked of the kernel at INIT (pyfuse3)
        self.zero_message_open = self._zero_message_wanted and not self.passthrough.active
        off = (
            "FUSE passthrough"
            if self.passthrough.active
            else "--no-fastread"
            if not fastread
            else "pyfuse3 built without fastread"
            if not FASTREAD
            else "--no-fastloop"
            if not self.fastloop
            else "no zero-message opens"
        )
        wanted = fastread and FASTREAD and self.fastloop and self.zero_message_open
        self.fastread = FastReads(_FastReadTable(), wanted=wanted, off=off)

    def init(self) -> None:
        if self.passthrough.active and not pyfuse3.passthrough_enabled():
            self.passthrough.disable("the kernel does not offer FUSE passthrough")
            self.zero_message_open = self._zero_message_wanted
        if FASTOPEN:
            pyfuse3.passthrough_fastopen(self.fastopen)
        if self.fastread.active and not pyfuse3.passthrough_stats()["fastloop"]:
            self.fastread.disable("no C thread reads this mount's requests (allow_root)")
        if FASTREAD:
            pyfuse3.fastread(self.fastread.active)
        self._token = trio.lowlevel.current_trio_token()
        super().init()

    def transport_stats(self) -> dict:
        """Where requests come from (io_uring queues, or /dev/fuse and why), and counts."""
        t = pyfuse3.passthrough_stats() if URING else {}
        queues = t.get("uring_queues", 0)
        if queues:
            requests = f"io_uring ({queues} queues)"
        elif self.io_uring:
            requests = "/dev/fuse (the kernel did not take io_uring at INIT)"
        else:
            requests = self._transport
        return {
            "requests": requests,
            "io_uring_queues": queues,
            "io_uring_requests": t.get("uring_requests", 0),
            "io_uring_answered_in_c": t.get("uring_answered", 0),
            "io_uring_handed_to_python": t.get("uring_handed", 0),
            "lookups_answered_in_c": t.get("lookup_answered", 0),
            "lookup_names_in_c": t.get("lookup_names", 0),
        }

    def backing_evicted(self, st_dev: int, st_ino: int) -> None:
        """From the evicting thread: the C table is the loop's, so retract there."""
        token = getattr(self, "_token", None)
        if token is not None and (self.passthrough.wanted or self.fastread.active):
            try:
                token.run_sync_soon(self._evicted, st_dev, st_ino)
            except trio.RunFinishedError:
                pass  # unmounted: every id is closed already

    def _evicted(self, st_dev: int, st_ino: int) -> None:
        try:  # runs in trio's loop, outside any task: an exception here would end the mount
            if self.passthrough.wanted:
                self.passthrough.evicted(st_dev, st_ino)
            if FASTREAD:
                self.fastread.evicted(st_dev, st_ino)
        except Exception:
            log.exception("retracting an evicted backing file")

    async def _thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        # read-only work may be abandoned at unmount (e.g. a lookup waiting for a listing)
        return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter, abandon_on_cancel=True)

    def _timeout(self, ino: int) -> float:
        return 0.0 if self.view.is_virtual(ino) else RO_TIMEOUT

    @_fuse_errors
    async def lookup(self, parent_inode, name, ctx=None):
        text = os.fsdecode(name)
        if text in (".", ".."):
            raise pyfuse3.FUSEError(errno.ENOENT)
        if self.view.is_hint(text):  # a read-order hint (fuse_adapter.hints): never an entry
            # in a thread: its files' directory pages may have to be listed again
            await self._thread(self.view.hint, text)
            raise pyfuse3.FUSEError(errno.ENOENT)  # not cached by the kernel, unlike st_ino=0
        ino = self.view.lookup_now(parent_inode, text)
        if ino is ...:  # the incremental listing has not reached this name yet
            ino = await self._thread(self.view.lookup, parent_inode, text)
        if ino is None:
            # a negative entry the kernel may cache: the namespace never changes
            e = pyfuse3.EntryAttributes()
            e.st_ino = 0
            e.entry_timeout = RO_TIMEOUT
            return e
        e = _entry(self.view.getattr(ino), self._timeout(ino))
        if self._lookup_in_c and not self.view.is_virtual(ino):
            # The namespace never changes while mounted and forget() is a no-op, so this
            # answer stays right: the C threads give it when the kernel asks again after
            # dropping the dentry (an SSD-tier hit then costs no Python request at all).
            # Virtual files (their size changes) and hints (never entries) keep coming here.
            pyfuse3.lookup_publish(parent_inode, name, e)
        return e

    async def forget(self, inode_list):
        pass  # inodes live as long as the mount: nothing to free

    async def _resident(self, inode: int) -> None:
        """A version mount's namespace is paged (``paged_tree``): a file whose directory
        page was dropped is listed again in a thread, never on this loop."""
        tree = self.view.tree
        if not getattr(tree, "resident", _always)(inode):
            await self._thread(tree.make_resident, inode)

    @_fuse_errors
    async def getattr(self, inode, ctx=None):
        await self._resident(inode)
        return _entry(self.view.getattr(inode), self._timeout(inode))

    @_fuse_errors
    async def readlink(self, inode, ctx):
        return os.fsencode(self.view.readlink(inode))

    @_fuse_errors
    async def opendir(self, inode, ctx):
        self.view.readdir(inode, 1 << 62, wait=False)  # validates that it is a directory
        return inode

    @_fuse_errors
    async def readdir(self, fh, start_id, token):
        entries = self.view.readdir(fh, start_id, wait=False)
        if not entries and not self.view.dir_complete(fh):
            entries = await self._thread(lambda: self.view.readdir(fh, start_id, wait=True))
        for name, ino, next_id in entries:
            attrs = _entry(self.view.getattr(ino), self._timeout(ino))
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attrs, next_id):
                return

    async def releasedir(self, fh):
        pass

    @_fuse_errors
    async def open(self, inode, flags, ctx):
        # reached for: writes, virtual files, files not published (yet) to pyfuse3's C table,
        # and published files C found changed on disk (fastopen.patch answers the others)
        write = flags & os.O_ACCMODE != os.O_RDONLY or flags & (os.O_TRUNC | os.O_APPEND)
        await self._resident(inode)
        if self.zero_message_open and not write:
            raise pyfuse3.FUSEError(errno.ENOSYS)  # "open files yourself from now on"
        pt = self.passthrough
        virtual = self.view.is_virtual(inode)
        direct = virtual
        if pt.wanted and not write and not virtual:
            got = pt.reuse(inode)
            if got is None and pt.may_publish(inode):
                # A file verified before: open + getxattr + fstat of its page file, inline.
                # The one exception to "the loop does in-memory work only": measured, a
                # thread hop doubles the daemon's CPU per open (docs/benchmarks.md), and the
                # calls wait for the disk only when the page file's entry is not cached.
                # A first open reads and checks the file: in a thread.
                fd = self._backing_fd(inode, False)
                if fd == -1:
                    fd = await self._thread(self._backing_fd, inode, True)
                elif fd == -2:
                    # a cold one-page file: its first READ's fetch is done now, in the same
                    # thread hop, so the kernel serves even this handle from the page file
                    # (no READ, no reply copy). Its errors are this open's, as the READ's
                    # would have been (ESTALE for a changed object, EIO, ...).
                    fd = await self._thread(lambda: self.view.backing_fd(inode, fetch=True))
                got = pt.publish(inode, fd, lambda: self._still_verified(inode, fd))
            if got is None and pt.held(inode):
                # its passthrough handles hold a file that changed (e.g. evicted): the kernel
                # takes no other backing file until they close; check that one again
                state = await self._thread(self._recheck, inode)
                got = pt.revalidate(inode, state) if state is not None else None
                direct = got is None  # the kernel allows direct I/O next to passthrough
            if got is not None:
                return pyfuse3.FileInfo(fh=got[0], backing_id=got[1])
        fh = self.view.open(inode, write=bool(write))
        if pt.wanted:
            pt.opened(fh, inode, direct=direct)
        return pyfuse3.FileInfo(fh=fh, keep_cache=not direct, direct_io=direct)

    def _backing_fd(self, inode: int, verify: bool) -> int | None:
        """A backing file (-1: not verified yet, with ``verify=False``), or None on any trouble."""
        try:
            return self.view.backing_fd(inode, verify=verify, fetch=False)
        except Exception as exc:  # the open still succeeds, through the daemon
            log.warning("passthrough open of inode %d: %s; reading through the daemon", inode, exc)
            return None

    def _still_verified(self, inode: int, fd: int) -> bool:
        """Whether ``fd``, just published for ``inode``, is still in the state it was
        verified in: one ``fstat`` of it, no data read, no file opened by name (each system
        call on this loop hands the GIL to the fetch threads). ``fd`` belongs to the C table
        now; only a change the C code finds at an open closes it, and then this ``fstat``
        fails or sees another file, so the answer is False and the open takes the ordinary
        path: never a wrong yes."""
        try:
            return self.view.backing_unchanged(inode, fd)
        except Exception as exc:  # the open still succeeds, through the daemon
            log.warning("passthrough open of inode %d: %s; reading through the daemon", inode, exc)
            return False

    def _recheck(self, inode: int) -> tuple[int, int, int, int] | None:
        """Blocking: check the file the C table holds for ``inode`` again; its state
        (``fd_state``) if it passed and did not change meanwhile, else None."""
        fd = self.passthrough.held_fd(inode)
        if fd < 0:
            return None
        try:
            before = fd_state(fd)
            if self.view.backing_check(inode, fd) and fd_state(fd) == before:
                return before
            return None
        except Exception as exc:
            log.warning("passthrough open of inode %d: %s; reading through the daemon", inode, exc)
            return None
        finally:
            os.close(fd)

    @_fuse_errors
    async def read(self, fh, off, size):
        if NO_OPEN_FH is not None and fh & NO_OPEN_FH:
            ino = fh & ~NO_OPEN_FH
            await self._resident(ino)
            if self.fastread.may_publish(ino):
                await self._publish_page_file(ino)  # later READs of it: answered in C
            data = self.view.read_inode_now(ino, off, size)  # in RAM: answered inline, no thread hop
            if data is not None:
                return data
            return await self._thread(self.view.read_inode, ino, off, size)
        return await self._thread(self.view.read, fh, off, size)

    async def _publish_page_file(self, ino: int) -> None:
        """The first READ of a file (zero-message opens) that reached Python: publish its
        verified page file, so the C threads answer its later READs. A file verified before
        is looked up inline (metadata only, as a passthrough open does); one that needs
        reading is checked in a worker thread, and a cold one-page file is fetched whole
        there first (this READ's own work, done once). Any trouble: the READ is answered
        as before, through the cache."""
        fd = self._backing_fd(ino, False)
        if fd == -1:
            fd = await self._thread(self._backing_fd, ino, True)
        elif fd == -2:
            fd = await self._thread(lambda: self.view.backing_fd(ino, fetch=True))
        if fd is not None and fd >= 0:
            self.fastread.publish(ino, fd, lambda: self._still_verified(ino, fd))

    async def flush(self, fh):
        # nothing to flush on a read-only mount: ENOSYS once makes the kernel stop sending
        # FLUSH at every close() (fc->no_flush), one request per file fewer with OPEN in use
        raise pyfuse3.FUSEError(errno.ENOSYS)

    async def release(self, fh):
        self.passthrough.released(fh)
        self.view.release(fh)

    @_fuse_errors
    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = IO_SIZE
        s.f_blocks = s.f_bfree = s.f_bavail = 0
        s.f_files = self.view.tree.inode_count()
        s.f_ffree = s.f_favail = 0
        s.f_namemax = 255
        return s

    # every mutation: EROFS (the kernel already refuses most of them on an ``ro`` mount)
    async def _erofs(self, *args: Any, **kwargs: Any) -> Any:
        raise pyfuse3.FUSEError(errno.EROFS)

    setattr = mknod = mkdir = unlink = rmdir = symlink = rename = link = _erofs
    write = create = setxattr = removexattr = fsync = fsyncdir = _erofs


QUOTA_BLOCK = 4096  # statfs unit of a quota'd workspace: df rounds a quota down to it, not to 1 MiB


class WorkspaceOps(_Ops):
    """FUSE requests -> WorkspaceView (every call blocks on the journal or the shared tier).

    ``flush`` (each close(2)) and ``fsync`` both make the file durable before replying, so a
    successful close keeps the write-back promise even though ``release`` is asynchronous.
    """

    def __init__(
        self, view, *, threads: int = 16, timeout: float = 1.0, write_passthrough: bool = False
    ) -> None:
        super().__init__()
        self.view = view  # fuse_adapter.workspace.WorkspaceView
        view.forget_entry = lambda parent_ino, name: pyfuse3.invalidate_entry_async(
            parent_ino, os.fsencode(name), ignore_enoent=True
        )
        self.limiter = trio.CapacityLimiter(threads)
        self.timeout = timeout
        # passthrough writes (fuse_adapter/workspace.py): asked of the kernel at INIT
        self.enable_passthrough = write_passthrough and PASSTHROUGH
        if not write_passthrough:
            view.passthrough_off("the default; --passthrough stages written files", asked=False)
        elif not PASSTHROUGH:
            view.passthrough_off(
                "pyfuse3 built without libfuse >= 3.16 (scripts/build_libfuse.sh did not run)"
            )

    def init(self) -> None:
        if self.enable_passthrough:
            if pyfuse3.passthrough_enabled():
                self.view.passthrough_on(_Backing())
            else:
                self.view.passthrough_off("the kernel does not offer FUSE passthrough (Linux >= 6.9)")
        super().init()

    async def _thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=self.limiter)

    def _entry(self, s: Stat) -> pyfuse3.EntryAttributes:
        return _entry(s, self.timeout)

    @_fuse_errors
    async def lookup(self, parent_inode, name, ctx=None):
        text = os.fsdecode(name)
        if text in (".", ".."):
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._entry(await self._thread(self.view.lookup, parent_inode, text))

    async def forget(self, inode_list):
        for ino, n in inode_list:
            self.view.forget(ino, n)

    @_fuse_errors
    async def getattr(self, inode, ctx=None):
        return self._entry(await self._thread(self.view.getattr, inode))

    @_fuse_errors
    async def setattr(self, inode, attr, fields, fh, ctx):
        if fields.update_uid or fields.update_gid:
            raise pyfuse3.FUSEError(errno.EPERM)
        if fields.update_size:
            return self._entry(await self._thread(self.view.truncate, inode, attr.st_size, fh))
        # chmod and utimes are accepted and ignored (docs/semantics.md)
        return self._entry(await self._thread(self.view.getattr, inode))

    @_fuse_errors
    async def opendir(self, inode, ctx):
        return inode

    @_fuse_errors
    async def readdir(self, fh, start_id, token):
        for name, st, next_id in await self._thread(self.view.readdir, fh, start_id):
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self._entry(st), next_id):
                return
            self.view.confirm_listed(st)

    async def releasedir(self, fh):
        pass

    @_fuse_errors
    async def mkdir(self, parent_inode, name, mode, ctx):
        return self._entry(await self._thread(self.view.mkdir, parent_inode, os.fsdecode(name)))

    @_fuse_errors
    async def rmdir(self, parent_inode, name, ctx):
        await self._thread(self.view.rmdir, parent_inode, os.fsdecode(name))

    @_fuse_errors
    async def unlink(self, parent_inode, name, ctx):
        await self._thread(self.view.unlink, parent_inode, os.fsdecode(name))

    @_fuse_errors
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise pyfuse3.FUSEError(errno.EINVAL)
        noreplace = bool(flags & pyfuse3.RENAME_NOREPLACE)
        await self._thread(
            self.view.rename,
            parent_inode_old,
            os.fsdecode(name_old),
            parent_inode_new,
            os.fsdecode(name_new),
            noreplace=noreplace,
        )

    @_fuse_errors
    async def create(self, parent_inode, name, mode, flags, ctx):
        fh, st, backing_id, direct = await self._thread(
            self.view.create, parent_inode, os.fsdecode(name), exclusive=bool(flags & os.O_EXCL)
        )
        return _file_info(fh, backing_id, direct), self._entry(st)

    @_fuse_errors
    async def open(self, inode, flags, ctx):
        fh, backing_id, direct = await self._thread(self.view.open, inode, truncate=bool(flags & os.O_TRUNC))
        return _file_info(fh, backing_id, direct)

    @_fuse_errors
    async def read(self, fh, off, size):
        return await self._thread(self.view.read, fh, off, size)

    @_fuse_errors
    async def write(self, fh, off, buf):
        return await self._thread(self.view.write, fh, off, buf)

    @_fuse_errors
    async def flush(self, fh):
        await self._thread(self.view.flush, fh)

    @_fuse_errors
    async def fsync(self, fh, datasync):
        await self._thread(self.view.fsync, fh)

    @_fuse_errors
    async def release(self, fh):
        await self._thread(self.view.release, fh)

    async def fsyncdir(self, fh, datasync):
        pass  # namespace changes are journaled (durable) before each reply

    async def getxattr(self, inode, name, ctx):
        # ENOSYS once makes the kernel stop asking (fc->no_getxattr): it asked for
        # security.capability before every write(2), one request per write even with passthrough
        raise pyfuse3.FUSEError(errno.ENOSYS)

    @_fuse_errors
    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = IO_SIZE
        s.f_blocks = s.f_bfree = s.f_bavail = 1 << 30
        quota = self.view.quota
        if quota is not None:  # df shows the volume's capacity (fuse_adapter/quota.py)
            s.f_bsize = s.f_frsize = QUOTA_BLOCK
            s.f_blocks = quota.limit // QUOTA_BLOCK
            s.f_bfree = s.f_bavail = quota.available // QUOTA_BLOCK
        s.f_files = s.f_ffree = s.f_favail = 1 << 30
        s.f_namemax = 255
        return s

    async def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise pyfuse3.FUSEError(errno.ENOTSUP)

    symlink = link = mknod = _unsupported


# --- mount lifecycle -----------------------------------------------------------------------------
def mount_options(*, fsname: str, read_only: bool, allow_other: bool = False) -> set[str]:
    opts = set(pyfuse3.default_options)
    opts |= {f"fsname={fsname}", "subtype=datahub"}
    if read_only:
        opts.add("ro")
    if allow_other:
        opts.add("allow_other")
    return opts


def mount_device(mountpoint: str) -> str:
    """``major:minor`` of a mount, from /proc/self/mountinfo: no request to the file system
    (a stat from inside the daemon could wait forever on its own stopped loop)."""
    target = os.path.abspath(mountpoint)
    device = None
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            if fields[4].replace("\\040", " ") == target:
                device = fields[2]  # the last match is the top-most mount
    if device is None:
        raise FileNotFoundError(f"{mountpoint} is not mounted")
    return device


def set_readahead(mountpoint: str, kib: int) -> None:
    """Raise the kernel readahead of this mount (root only; best effort).

    FUSE starts with the VM default (128 KiB), which caps each sequential read request the
    kernel sends us; with 1 MiB a cold sequential read costs a quarter as many round trips.
    """
    try:
        path = f"/sys/class/bdi/{mount_device(mountpoint)}/read_ahead_kb"
        with open(path, "w") as fh:
            fh.write(str(kib))
    except OSError as exc:
        log.info("could not set readahead of %s to %d KiB: %s", mountpoint, kib, exc)


def c_requests() -> int:
    """Requests pyfuse3's C threads answered or handed to the loop (fastloop, io_uring): a
    warm open answered there never makes the loop's thread read anything."""
    if not FASTLOOP:
        return 0
    t = pyfuse3.passthrough_stats()
    return (
        t["loop_opens"] + t["loop_releases"] + t["loop_ioctls"] + t.get("loop_lookups", 0) + t["loop_handed"]
    )


def request_counter(in_c: Callable[[], int] = c_requests) -> Callable[[], int]:
    """A number that moves with every request the mount serves.

    Why: a reader served from the kernel's page cache never reaches the daemon's code, so
    the cache cannot see that it is busy; but every warm Python ``open()`` still sends the
    ``isatty`` ioctl (and, with passthrough, OPEN and RELEASE). Read on the loop's thread,
    each is one read syscall of that thread (/proc/self/task/TID/io ``syscr``; call this in
    the thread that will run ``serve``); answered by pyfuse3's C threads (the default:
    fastloop, io_uring), each moves their counters (``in_c``). Both cost the requests nothing.
    """
    path = f"/proc/self/task/{threading.get_native_id()}/io"

    def count() -> int:
        reads = 0
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(b"syscr"):
                    reads = int(line.split()[1])
                    break
        return reads + in_c()

    return count


def serve(
    ops: _Ops,
    mountpoint: str,
    options: set[str],
    *,
    on_ready: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
    readahead_kib: int = 0,
    max_tasks: int = 64,
) -> None:
    """Mount, serve until unmounted or SIGTERM/SIGINT, then unmount cleanly. Blocks.

    ``on_ready`` runs once the mount is live; ``on_stop`` (blocking, e.g. a workspace
    flush) runs in a worker thread after requests stop and before the unmount completes.
    """

    async def main() -> None:
        # the receiver exists before the mount does: a signal sent as soon as the mount
        # appears is queued for watch_signals instead of killing the process mid-mount
        stops = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
        with trio.open_signal_receiver(*stops) as sigs:
            # blocked while libfuse mounts: the mount is visible before init returns, and a
            # stop signal then interrupted libfuse's waitpid ("fuse: waitpid: Interrupted
            # system call"), failed the init and was re-raised as KeyboardInterrupt (exit
            # 130, the mount left behind). Unblocked, it reaches the receiver.
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
            try:
                pyfuse3.init(ops, mountpoint, options)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            await _serve_mounted(sigs)

    async def _serve_mounted(sigs: AsyncIterator[int]) -> None:
        unmounted = False
        try:
            async with trio.open_nursery() as nursery:

                async def watch_signals() -> None:
                    async for sig in sigs:
                        log.info("signal %d: unmounting %s", sig, mountpoint)
                        pyfuse3.terminate()
                        return

                async def after_mount() -> None:
                    if readahead_kib:
                        # after INIT: its reply would clamp the readahead back to the default
                        if isinstance(ops, _Ops):
                            await ops.initialized.wait()
                        set_readahead(mountpoint, readahead_kib)
                    if on_ready is not None:  # in a thread: it may touch the file system
                        await trio.to_thread.run_sync(on_ready, abandon_on_cancel=True)

                nursery.start_soon(watch_signals)
                nursery.start_soon(after_mount)
                if FASTLOOP:  # only read-only mounts ask for it; writes gain nothing from a hop
                    pyfuse3.passthrough_fastloop(bool(getattr(ops, "fastloop", False)))
                if URING:
                    pyfuse3.passthrough_uring(bool(getattr(ops, "io_uring", False)))
                await pyfuse3.main(min_tasks=4, max_tasks=max_tasks)
                unmounted = True
                nursery.cancel_scope.cancel()
        finally:
            try:
                if on_stop is not None:  # a failed flush must still unmount, and then be reported
                    await trio.to_thread.run_sync(on_stop)
            finally:
                pyfuse3.close(unmount=True)
                log.info("%s %s", "unmounted" if unmounted else "stopped", mountpoint)

    try:
        trio.run(main)
    except BaseExceptionGroup as group:
        # one failure inside the nursery (e.g. on_ready could not write the mount record)
        # reaches the caller as itself, so the CLI reports it as an error, not a traceback
        only = _single_leaf(group)
        if only is None:
            raise
        raise only from None


def _single_leaf(group: BaseExceptionGroup) -> BaseException | None:
    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else None
