"""The pyfuse3 shim: the only module that imports pyfuse3, the C layer's only Python caller.

It adapts the FUSE protocol to two plain-Python cores and translates errors, nothing else:

* :class:`ReadOnlyOps` over ``readonly.ReadOnlyView`` (dataset versions, bucket snapshots);
* :class:`WorkspaceOps` over ``workspace.WorkspaceView`` (a writable write-back workspace).

Decisions live elsewhere, as plain code: the fast path (``fast_path``: what a mount asked
for, what this build can do, what is in effect), the open policy (``passthrough``), READs
in C (``fastread``), the page-file look-up (``page_files``). ``fuse_session`` drives a
mount's session through :func:`mount`, :func:`run_requests`, :func:`terminate` and
:func:`unmount`; ``mount_assembly`` builds the mounts.

Rules kept here: the core raises ``datahub.errors`` types and this module turns them into
an errno exactly once (:func:`_errno_of`); anything that may block (the listing loader,
the cache, the workspace journal) runs in a worker thread under a CapacityLimiter, so the
trio event loop only ever does in-memory work and many readers are served in parallel.
"""

from __future__ import annotations

import errno
import logging
import os
import string
import threading
from collections.abc import Callable
from functools import partial, wraps
from typing import Any
from urllib.parse import quote

import pyfuse3
import trio

from datahub.errors import DatahubError, InvalidInput, ModeNotKept
from fuse_adapter.fast_path import Build, FastPath, c_writes_off, write_passthrough_off
from fuse_adapter.fastread import FastReads
from fuse_adapter.hop import Hop, Job
from fuse_adapter.mount_sys import requests_in_c
from fuse_adapter.page_files import still_verified, verified_fd
from fuse_adapter.passthrough import PassthroughOpens, Route, open_route
from fuse_adapter.read_mode import DRAIN_SECONDS, ReadMode, min_opens_for
from fuse_adapter.readonly import DIR_MODE, FILE_MODE, IO_SIZE, ReadOnlyView, Stat
from fuse_adapter.uring import transport_stats

log = logging.getLogger(__name__)

RO_TIMEOUT = 24 * 3600.0  # immutable: the kernel may keep entries and attributes for a day
MAX_IO = 1024 * 1024  # max_read / readahead target (the kernel's FUSE limit here is 256 pages)
#: slots of each C table of published page files (8,192) fstat()ed per second by the sweep
#: for files another process evicted: a full table in 16 s, ~256 fstat calls a second at most
SWEEP_SLOTS = 512


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


class Ops(pyfuse3.Operations):
    """Both file systems: knows when the kernel's INIT has been answered, and runs blocking
    work in worker threads under one limiter (``abandon``: such work may be left behind
    at unmount, e.g. a lookup waiting for a listing; a workspace's journal writes may not)."""

    def __init__(self, threads: int, *, abandon: bool) -> None:
        super().__init__()
        self.initialized = trio.Event()
        self.limiter = trio.CapacityLimiter(threads)
        self._abandon = abandon

    async def _thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        call = partial(fn, *args, **kwargs)
        return await trio.to_thread.run_sync(call, limiter=self.limiter, abandon_on_cancel=self._abandon)

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

    async def releasedir(self, fh):
        pass


#: what this build of pyfuse3 can do, probed once (``fast_path.Build``; docs/architecture.md)
BUILD = Build.probe(pyfuse3)
#: the probes one by one, for the tests that skip without a capability
NO_OPEN_FH: int | None = BUILD.no_open_fh  # read() receives ``inode | NO_OPEN_FH`` (zero-message opens)
PASSTHROUGH = BUILD.passthrough
FASTOPEN = BUILD.fastopen
FASTLOOP = BUILD.fastloop
URING = BUILD.uring
LOOKUP_IN_C = BUILD.lookup_in_c
FASTREAD = BUILD.fastread
#: a workspace's requests can be run by pyfuse3's C threads (``pyfuse3.dispatch``, dispatch.h)
_DISPATCH = BUILD.fastloop and hasattr(pyfuse3, "dispatch")
#: the most threads ``pyfuse3.dispatch`` takes (dispatch.h's ``PYFUSE3_FD_MAX_THREADS``): more
#: raised once the mount was up, and a ``--threads 300`` daemon exited (review20c)
DISPATCH_MAX_THREADS = 256


def _always(_inode: int) -> bool:
    return True


def _never(_inode: int) -> bool:
    return False


class _CTable:
    """pyfuse3's C functions named ``prefix + name`` as one object: the tables the policies
    are given (``passthrough.Table`` and ``workspace.Backing``: "passthrough_";
    ``fastread.Table``: "fastread_"). Looked up at each call, as a build without a table
    has none of its functions and the policies then never call them."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(pyfuse3, self._prefix + name)


class _FastReadTable(_CTable):
    def __init__(self) -> None:
        super().__init__("fastread_")

    def stats(self) -> dict:  # asked by every mount's stats, also of a build without the table
        return pyfuse3.fastread_stats() if FASTREAD else {}


def _statvfs(bsize: int, blocks: int, free: int, files: int, ffree: int) -> pyfuse3.StatvfsData:
    s = pyfuse3.StatvfsData()
    s.f_bsize = s.f_frsize = bsize
    s.f_blocks, s.f_bfree, s.f_bavail = blocks, free, free
    s.f_files, s.f_ffree, s.f_favail = files, ffree, ffree
    s.f_namemax = 255
    return s


def _file_info(fh: int, backing_id: int, direct: bool) -> pyfuse3.FileInfo:
    """A workspace handle: served by the kernel from its staged file (``backing_id``), or
    through the daemon (no backing id), with direct I/O if ``direct``. Both: a handle that
    names the staged file, as the kernel demands beside its passthrough handles, whose
    reads and writes still come to the daemon (an ``O_SYNC`` one: ``WorkspaceView._backing_of``)."""
    if backing_id:
        return pyfuse3.FileInfo(fh=fh, backing_id=backing_id, direct_io=direct)
    return pyfuse3.FileInfo(fh=fh, keep_cache=False, direct_io=direct)


class ReadOnlyOps(Ops):
    """FUSE requests -> ReadOnlyView. Writes are refused with EROFS (the mount is also ``ro``).

    ``fast``: the mount's fast path (``fast_path.decide``: zero-message opens, passthrough
    opens, READs, LOOKUPs and opens answered in C, io_uring; what each is and why, there).
    This class only carries it out: it tells pyfuse3 at INIT, hands opens and first READs
    to the policies (``passthrough``, ``fastread``) and publishes LOOKUP answers.
    """

    def __init__(
        self, view: ReadOnlyView, fast: FastPath, *, threads: int = 32, drain_seconds: float = DRAIN_SECONDS
    ) -> None:
        super().__init__(threads, abandon=True)
        self.view = view
        self.fast = fast
        self.passthrough = PassthroughOpens(
            _CTable("passthrough_"), wanted=fast.passthrough, off=fast.passthrough_off
        )
        self.fastloop = fast.fastloop  # read by serve() before pyfuse3.main()
        self.io_uring = fast.io_uring  # read by serve() before pyfuse3.main()
        self.enable_passthrough = fast.passthrough  # asked of the kernel at INIT (pyfuse3)
        self.zero_message_open = fast.zero_message_open
        self.fastread = FastReads(_FastReadTable(), wanted=fast.fastread, off=fast.fastread_off)
        self.read_mode = ReadMode(
            auto=fast.auto,
            passthrough=self.passthrough,
            fastread=self.fastread,
            still_verified=lambda ino, fd: still_verified(view, ino, fd),
            min_opens=min_opens_for(view.tree.inode_count()),
            drain_seconds=drain_seconds,
        )

    def init(self) -> None:
        if self.passthrough.active and not pyfuse3.passthrough_enabled():
            self.passthrough.disable("the kernel does not offer FUSE passthrough")
            self.zero_message_open = self.fast.zero_message_wanted
        if self.fast.build.sample_cached:  # the automatic read mode decides on what C's opens find cached
            pyfuse3.passthrough_sample_cached(self.read_mode.waiting)
        if FASTOPEN:
            pyfuse3.passthrough_fastopen(self.fast.fastopen)
        if self.fastread.active and not pyfuse3.passthrough_stats()["fastloop"]:
            self.fastread.disable("no C thread reads this mount's requests (allow_root)")
        if FASTREAD:
            pyfuse3.fastread(self.fastread.active)
        self._token = trio.lowlevel.current_trio_token()
        super().init()

    def transport_stats(self) -> dict:
        """Where requests come from (io_uring queues, or /dev/fuse and why), and counts."""
        return transport_stats(pyfuse3.passthrough_stats() if URING or FASTLOOP else {}, self.fast)

    def read_mode_tick(self) -> None:
        """Once a second, from the mount's hits thread: feed the automatic read mode the C
        table's counters; switch on the loop when it says so."""
        token = getattr(self, "_token", None)
        mode = self.read_mode
        if mode.transition and mode.transition_tick(pyfuse3.fastread_stats()["reads"]):
            pyfuse3.fastread(True)  # O_DIRECT again
            mode.drop_page_files(lambda ino: self.view.backing_fd(ino, verify=False))  # one copy in RAM
        if token is None or not (mode.draining or mode.tick(pyfuse3.passthrough_stats())):
            return
        try:
            token.run_sync_soon(self._switch_read_mode)
        except trio.RunFinishedError:
            pass  # unmounted

    def _switch_read_mode(self) -> None:
        """On the loop: begin the switch, or end it if no passthrough handle is open."""
        try:  # runs in trio's loop, outside any task: an exception here would end the mount
            self.read_mode.begin()
            self._drained()
        except Exception:
            log.exception("switching the read mode")

    def _drained(self) -> None:
        if self.read_mode.draining and self.read_mode.drained(self.passthrough.handles_open()):
            self.zero_message_open = True  # the next OPEN is answered ENOSYS: no_open
            pyfuse3.passthrough_sample_cached(False)
            # the first epoch after: the page files are in the page cache, read them there
            # (buffered, each range dropped after its reply) rather than from the disk
            pyfuse3.fastread(True, dontneed=True, direct=False)

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

    def sweep_backing(self) -> None:
        """Once a second, from the mount's hits thread: on the loop (the C tables' Python
        side is the loop's), let go of published page files another process evicted."""
        token = getattr(self, "_token", None)
        if token is not None and (self.passthrough.wanted or self.fastread.active):
            try:
                token.run_sync_soon(self._sweep)
            except trio.RunFinishedError:
                pass  # unmounted: every id is closed already

    def _sweep(self) -> None:
        try:  # runs in trio's loop, outside any task: an exception here would end the mount
            gone = self.passthrough.sweep(SWEEP_SLOTS)
            if FASTREAD:
                gone += self.fastread.sweep(SWEEP_SLOTS)
            if gone:
                log.info("let go of %d page files another process removed or changed", gone)
        except Exception:
            log.exception("sweeping the published page files")

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
        if self.fast.lookup_in_c and not self.view.is_virtual(ino):
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
        tree = self.view.tree
        if getattr(tree, "is_paged", _never)(fh):
            # a paged directory (paged_tree): the reply is packed in C from its page's
            # columns, no Python object per entry (pyfuse3's readdir_fill, readdir.h)
            page = tree.columns(fh, wait=False) or await self._thread(tree.columns, fh, wait=True)
            v = self.view
            pyfuse3.readdir_fill(
                token, page.names, page.name_ends, page.kinds, page.skip, page.inos, page.sizes,
                page.mtimes, start_id, FILE_MODE, DIR_MODE, v.uid, v.gid, IO_SIZE, RO_TIMEOUT,
            )  # fmt: skip
            return
        entries = self.view.readdir(fh, start_id, wait=False)
        if not entries and not self.view.dir_complete(fh):
            entries = await self._thread(self.view.readdir, fh, start_id, wait=True)
        for name, ino, next_id in entries:
            attrs = _entry(self.view.getattr(ino), self._timeout(ino))
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attrs, next_id):
                return

    @_fuse_errors
    async def open(self, inode, flags, ctx):
        # reached for: writes, virtual files, files not published (yet) to pyfuse3's C table,
        # and published files C found changed on disk (its open table answers the others)
        write = bool(flags & os.O_ACCMODE != os.O_RDONLY or flags & (os.O_TRUNC | os.O_APPEND))
        self._drained()  # the automatic read mode answers ENOSYS once no passthrough handle is open
        await self._resident(inode)
        pt = self.passthrough
        virtual = self.view.is_virtual(inode)
        route = open_route(
            write=write, virtual=virtual, zero_message_open=self.zero_message_open, passthrough=pt.wanted
        )
        if route is Route.ZERO_MESSAGE:
            raise pyfuse3.FUSEError(errno.ENOSYS)  # "open files yourself from now on"
        direct = virtual
        if route is Route.PASSTHROUGH:
            got, direct = await pt.open(inode, self.view, self._thread)
            if got is not None:
                return pyfuse3.FileInfo(fh=got[0], backing_id=got[1])
        fh = self.view.open(inode, write=write)
        backing_id = pt.opened(fh, inode, direct=direct) if pt.wanted else 0
        if backing_id:  # beside passthrough handles: their file, its reads through the daemon
            return pyfuse3.FileInfo(fh=fh, backing_id=backing_id, direct_io=True)
        return pyfuse3.FileInfo(fh=fh, keep_cache=not direct, direct_io=direct)

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
        verified page file (``page_files``), so the C threads answer its later READs. Any
        trouble: the READ is answered as before, through the cache."""
        fd = await verified_fd(self.view, ino, self._thread)
        if fd is not None:
            self.fastread.publish(ino, fd, lambda: still_verified(self.view, ino, fd))

    async def flush(self, fh):
        # nothing to flush on a read-only mount: ENOSYS once makes the kernel stop sending
        # FLUSH at every close() (fc->no_flush), one request per file fewer with OPEN in use
        raise pyfuse3.FUSEError(errno.ENOSYS)

    async def release(self, fh):
        self.passthrough.released(fh)
        self.view.release(fh)

    @_fuse_errors
    async def statfs(self, ctx):
        return _statvfs(IO_SIZE, 0, 0, self.view.tree.inode_count(), 0)

    # every mutation: EROFS (the kernel already refuses most of them on an ``ro`` mount)
    async def _erofs(self, *args: Any, **kwargs: Any) -> Any:
        raise pyfuse3.FUSEError(errno.EROFS)

    setattr = mknod = mkdir = unlink = rmdir = symlink = rename = link = _erofs
    write = create = setxattr = removexattr = fsync = fsyncdir = _erofs


def forget_entry_within(timeout: float, parent_ino: int, name: str) -> None:
    """Make the kernel forget ``name`` in ``parent_ino`` before the caller replies, or wait
    until its cached entry has expired by itself.

    Why: a file discarded at close (ENOSPC, the quota) must not be seen once its close(2)
    returned, and the kernel keeps a positive entry for ``timeout`` seconds after its last
    lookup without asking the daemon. A queued invalidation (``invalidate_entry_async``) ran
    after the FLUSH reply, so for up to a second the failed file still looked present
    (``tests/fuse/test_remount.py``, 1 run in 2 under load). The invalidation blocks while
    the kernel holds the directory for a request in flight (a CREATE beside it), so it runs
    in a thread of its own and the wait is bounded: the daemon answers ENOENT for the name
    from the discard on, so after ``timeout`` seconds no positive entry for it can be left.
    """
    done = threading.Event()

    def invalidate() -> None:
        try:
            pyfuse3.invalidate_entry(parent_ino, os.fsencode(name))
        except OSError as exc:  # ENOENT: the kernel did not know the entry; nothing to forget
            if exc.errno != errno.ENOENT:
                log.warning("could not make the kernel forget %r in directory %d: %s", name, parent_ino, exc)
        finally:
            done.set()

    threading.Thread(target=invalidate, name="forget entry", daemon=True).start()
    done.wait(timeout)


def _started_calls_finish(_raise_cancel: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED  # the task waits for its call to end (``WorkspaceOps._thread``)


class WorkspaceOps(Ops):
    """FUSE requests -> WorkspaceView (every call blocks on the journal or the shared tier).

    ``flush`` (each close(2)) and ``fsync`` both make the file durable before replying, so a
    successful close keeps the write-back promise even though ``release`` is asynchronous.
    """

    def __init__(
        self,
        view,
        *,
        threads: int = 16,
        timeout: float = 1.0,
        write_passthrough: bool = False,
        writeback_cache: bool = False,
        c_writes: bool = False,
        request_loop: str = "c",
        shared: bool = False,
    ) -> None:
        if not BUILD.write_cached:  # write() would fail every WRITE (it takes ``cached``)
            raise DatahubError(
                "the installed pyfuse3 predates third_party/pyfuse3's write flags (WRITE_CACHED): "
                "rebuild it with `make install` (scripts/build_pyfuse3.sh)"
            )
        if not BUILD.write_sync:  # an RWF_DSYNC write through a direct-I/O handle would be lost
            raise DatahubError(
                "the installed pyfuse3 predates third_party/pyfuse3's write flags (WRITE_SYNC): "
                "rebuild it with `make install` (scripts/build_pyfuse3.sh)"
            )
        super().__init__(threads, abandon=False)
        # blocking requests (every small file's FLUSH) hop to threads of their own: half the
        # CPU of trio.to_thread's hop (fuse_adapter/hop.py); never abandoned, as before
        self._hop = Hop(threads, "workspace")
        self.view = view  # fuse_adapter.workspace.WorkspaceView
        # other accounts may enter (allow_other) and the files are the mounter's: a chmod that
        # would hide a file from them is refused, never accepted and ignored (``_keep_mode``;
        # workspace.shown_to_others)
        self.shared = shared
        view.forget_entry = partial(forget_entry_within, timeout)
        self.timeout = timeout
        off = write_passthrough_off(write_passthrough, BUILD)  # passthrough writes: asked at INIT
        self.enable_passthrough = not off
        if off:
            view.passthrough_off(off, asked=write_passthrough)
        # the kernel's write-back cache (FUSE_WRITEBACK_CACHE, asked at INIT by pyfuse3): the
        # kernel refuses passthrough next to it, so it is for the daemon path only
        if writeback_cache and not off:
            raise InvalidInput("the kernel's write-back cache and passthrough writes exclude each other")
        self.enable_writeback_cache = writeback_cache
        if writeback_cache:
            view.kernel_cache_on()
        # WRITEs of staged handles answered by pyfuse3's C reader thread (fastwrite.h): read by
        # serve() before pyfuse3.main(), which starts that thread only when asked
        self.c_writes_off = c_writes_off(
            asked=c_writes,
            passthrough=self.enable_passthrough,
            writeback_cache=writeback_cache,
            quota=view.quota is not None,
            build=BUILD,
        )
        # the request loop in C (pyfuse3.dispatch, dispatch.h): pyfuse3's C threads read the
        # requests and run these handlers themselves, no trio task and no hop per request; a
        # handler about to block (``_thread``) lets another thread read. "trio": the baseline.
        if request_loop not in ("c", "trio"):
            raise InvalidInput(f"the request loop is 'c' or 'trio', not {request_loop!r}")
        wanted = min(threads + 1, DISPATCH_MAX_THREADS)  # blocked beyond that: the role waits (vacant)
        self.dispatch_threads = wanted if request_loop == "c" and _DISPATCH else 0
        self.fastloop = not self.c_writes_off or self.dispatch_threads > 0
        self._c_writes_asked = c_writes

    def init(self) -> None:
        if self.enable_passthrough:
            if pyfuse3.passthrough_enabled():
                self.view.passthrough_on(_CTable("passthrough_"))
            else:
                self.view.passthrough_off("the kernel does not offer FUSE passthrough (Linux >= 6.9)")
        running = self.fastloop and pyfuse3.passthrough_stats()["fastloop"]
        if running and not self.c_writes_off:
            self.view.c_writes_on(_CTable("fastwrite_"))
        elif not self.enable_passthrough:
            why = self.c_writes_off or "pyfuse3 started no C reader thread (allow_root, or it failed)"
            self.view.c_writes_unavailable(why, asked=self._c_writes_asked)
        if self.dispatch_threads:
            on = bool(running and pyfuse3.passthrough_stats()["dispatch"])
            log.info(
                "workspace requests: %s",
                f"run by pyfuse3's C threads (at most {self.dispatch_threads})"
                if on
                else "pyfuse3's trio loop (no C reader thread: allow_root, or it failed)",
            )
        super().init()

    async def _thread(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in one of the hop's threads (``fuse_adapter/hop.py``). A
        cancelled task starts nothing; a started call is waited for, never abandoned (a journal
        write must finish), as ``trio.to_thread.run_sync`` with ``abandon_on_cancel=False``."""
        if _DISPATCH and pyfuse3.dispatch_blocking():
            return fn(*args, **kwargs)  # a dispatching thread blocks here; another one reads
        await trio.lowlevel.checkpoint_if_cancelled()
        task = trio.lowlevel.current_task()
        done = partial(trio.lowlevel.current_trio_token().run_sync_soon, trio.lowlevel.reschedule, task)
        job = Job(fn, args, kwargs, done)
        self._hop.submit(job)
        await trio.lowlevel.wait_task_rescheduled(_started_calls_finish)
        return job.outcome()

    def _entry(self, s: Stat) -> pyfuse3.EntryAttributes:
        return _entry(s, self.timeout)

    @_fuse_errors
    async def lookup(self, parent_inode, name, ctx=None):
        text = os.fsdecode(name)
        if text in (".", ".."):
            raise pyfuse3.FUSEError(errno.ENOENT)
        # inline, no worker-thread hop: a journal read and in-memory maps (docs/writeback.md)
        return self._entry(self.view.lookup(parent_inode, text))

    async def forget(self, inode_list):
        for ino, n in inode_list:
            self.view.forget(ino, n)

    @_fuse_errors
    async def getattr(self, inode, ctx=None):
        return self._entry(self.view.getattr(inode))  # inline, as lookup

    @_fuse_errors
    async def setattr(self, inode, attr, fields, fh, ctx):
        if fields.update_uid or fields.update_gid:
            raise pyfuse3.FUSEError(errno.EPERM)
        if fields.update_mode and self.shared:
            self._keep_mode(inode, attr.st_mode)
        if fields.update_size:
            return self._entry(await self._thread(self.view.truncate, inode, attr.st_size, fh))
        # chmod and utimes are accepted and ignored (docs/semantics.md)
        return self._entry(self.view.getattr(inode))

    def _keep_mode(self, inode: int, mode: int) -> None:
        """ModeNotKept when ``mode`` takes a bit the mount shows to group or others: on a mount
        other accounts enter, the file stays 0644 (a folder 0755) for them whatever is asked,
        so accepting ``chmod 600`` told its owner it was private while everyone read it."""
        shown = self.view.getattr(inode).mode & 0o777
        taken = shown & 0o077 & ~mode
        if taken:
            raise ModeNotKept(
                f"chmod {mode & 0o7777:04o} of {self.view.path_of(inode)!r} refused: this workspace "
                f"mount lets every local account in (--allow-other) and shows it {shown:04o} to "
                "them whatever is asked; keep private files out of it, or mount without --allow-other",
                mode=f"{mode & 0o7777:04o}",
            )

    @_fuse_errors
    async def opendir(self, inode, ctx):
        return inode

    @_fuse_errors
    async def readdir(self, fh, start_id, token):
        for name, st, next_id in await self._thread(self.view.readdir, fh, start_id):
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self._entry(st), next_id):
                return
            self.view.confirm_listed(st)

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
        text, exclusive = os.fsdecode(name), bool(flags & os.O_EXCL)
        # O_SYNC or O_DSYNC (O_SYNC holds O_DSYNC's bit), O_NOATIME: WorkspaceView.create
        how = {"sync": bool(flags & os.O_DSYNC), "noatime": bool(flags & os.O_NOATIME)}
        if self.view.creates_in_memory(parent_inode, text):  # an id in hand, nothing staged: no hop
            fh, st, backing_id, direct = self.view.create(parent_inode, text, exclusive=exclusive, **how)
        else:
            fh, st, backing_id, direct = await self._thread(
                self.view.create, parent_inode, text, exclusive=exclusive, **how
            )
        return _file_info(fh, backing_id, direct), self._entry(st)

    @_fuse_errors
    async def open(self, inode, flags, ctx):
        # O_RDONLY|O_TRUNC truncates on Linux: a change a revert could undo, so not a reader
        writable = flags & os.O_ACCMODE != os.O_RDONLY or bool(flags & os.O_TRUNC)
        fh, backing_id, direct = await self._thread(
            self.view.open,
            inode,
            truncate=bool(flags & os.O_TRUNC),
            writable=writable,
            sync=bool(flags & os.O_DSYNC),
            noatime=bool(flags & os.O_NOATIME),
        )
        return _file_info(fh, backing_id, direct)

    @_fuse_errors
    async def read(self, fh, off, size):
        return await self._thread(self.view.read, fh, off, size)

    @_fuse_errors
    async def write(self, fh, off, buf, cached, sync=False):
        # cached: from the kernel's write-back cache (FUSE_WRITE_CACHE), not inside a write(2);
        # sync: the WRITE's flags hold O_DSYNC (pyfuse3's WRITE_SYNC; WorkspaceView.write)
        if not sync and self.view.writes_in_memory(fh, off, len(buf)):  # a copy into a buffer: no hop
            return self.view.write(fh, off, buf, cached=cached)
        return await self._thread(self.view.write, fh, off, buf, cached=cached, sync=sync)

    @_fuse_errors
    async def flush(self, fh):
        if not self.view.flush_is_done(fh):  # e.g. a close after fsync: nothing to commit, no hop
            await self._thread(self.view.flush, fh)

    @_fuse_errors
    async def fsync(self, fh, datasync):
        await self._thread(self.view.fsync, fh)

    @_fuse_errors
    async def release(self, fh):
        if self.view.releases_now(fh):  # nothing to commit or delete: no hop
            self.view.release(fh)
        else:
            await self._thread(self.view.release, fh)

    @_fuse_errors
    async def access(self, inode, mode, ctx):
        # asked only without default_permissions (workspace.owner_only): the caller
        # is the owner, whose bits grant reading and writing; exec as the mode says (0644 files)
        return not mode & os.X_OK or bool(self.view.getattr(inode).mode & 0o111)

    async def fsyncdir(self, fh, datasync):
        pass  # namespace changes are journaled (durable) before each reply

    async def getxattr(self, inode, name, ctx):
        # ENOSYS once makes the kernel stop asking (fc->no_getxattr): it asked for
        # security.capability before every write(2), one request per write even with passthrough
        raise pyfuse3.FUSEError(errno.ENOSYS)

    @_fuse_errors
    async def statfs(self, ctx):
        quota = self.view.quota  # df shows the volume's capacity (fuse_adapter/quota.py)
        bsize, blocks, free = quota.df() if quota is not None else (IO_SIZE, 1 << 30, 1 << 30)
        return _statvfs(bsize, blocks, free, 1 << 30, 1 << 30)

    async def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise pyfuse3.FUSEError(errno.ENOTSUP)

    symlink = link = mknod = _unsupported


# --- mount lifecycle -----------------------------------------------------------------------------
def mount_options(
    *, fsname: str, read_only: bool, allow_other: bool = False, kernel_permissions: bool = True
) -> set[str]:
    """pyfuse3's options (``default_permissions``: the kernel checks modes) plus ours.

    ``kernel_permissions=False`` drops ``default_permissions``, for a mount where only its
    owner may enter and every file is shown as the owner's (``workspace.owner_only``): the
    kernel's checks could refuse nothing there, and each cost a GETATTR of the parent
    directory per created file (a create invalidates the directory's attributes).
    """
    opts = set(pyfuse3.default_options)
    if not kernel_permissions:
        opts.discard("default_permissions")
    opts |= {f"fsname={_option_value(fsname)}", "subtype=datahub"}
    if read_only:
        opts.add("ro")
    if allow_other:
        opts.add("allow_other")
    return opts


#: what a ``-o`` value keeps as is: libfuse splits options at commas (a backslash escapes)
_OPTION_SAFE = "".join(c for c in string.punctuation if c not in ",\\%")


def _option_value(text: str) -> str:
    """``text`` as one mount option's value: commas, backslashes, ``%``, spaces and non-ASCII
    percent-encoded. Why: pyfuse3 passes options as ASCII and libfuse splits them at commas,
    so a bucket mount of a prefix any S3 key may hold (``a,b``, ``données``) failed to
    mount at all, after its cache was opened (review14d)."""
    return quote(text, safe=_OPTION_SAFE)


def dispatch_stats() -> dict:
    """What the request loop in C did in the last session (``pyfuse3.dispatch``): requests
    run by its threads, threads started, reader roles handed over by a blocking handler."""
    if not _DISPATCH:
        return {}
    s = pyfuse3.passthrough_stats()
    return {
        "dispatched": s["dispatched"],
        "threads": s["dispatch_threads"],
        "handoffs": s["dispatch_handoffs"],
        "vacant": s["dispatch_vacant"],
    }


def c_requests() -> int:
    """Requests pyfuse3's C threads answered or handed to the loop (fastloop, io_uring): a
    warm open answered there never makes the loop's thread read anything."""
    return requests_in_c(pyfuse3.passthrough_stats()) if FASTLOOP else 0


# --- the session: what fuse_session.serve does with pyfuse3 ------------------------------------
def mount(ops: Ops, mountpoint: str, options: set[str]) -> None:
    """Mount and open the session (libfuse; the mount is visible before this returns)."""
    pyfuse3.init(ops, mountpoint, options)


def terminate() -> None:
    """Make :func:`run_requests` return (from the loop's thread)."""
    pyfuse3.terminate()


async def run_requests(ops: Ops, max_tasks: int) -> None:
    """Serve the mount's requests until it is unmounted or :func:`terminate` is called."""
    if FASTLOOP:  # read-only mounts, and workspace mounts whose staged handles' WRITEs C answers
        pyfuse3.passthrough_fastloop(bool(getattr(ops, "fastloop", False)))
    if URING:
        pyfuse3.passthrough_uring(bool(getattr(ops, "io_uring", False)))
    if _DISPATCH:  # a workspace's handlers run by pyfuse3's C threads (WorkspaceOps.dispatch_threads)
        pyfuse3.dispatch(int(getattr(ops, "dispatch_threads", 0)))
    await pyfuse3.main(min_tasks=4, max_tasks=max_tasks)


def unmount() -> None:
    """Close the session and unmount (every backing id and C table entry goes with it)."""
    pyfuse3.close(unmount=True)
