"""Staged files: a workspace file whose bytes live in an anonymous local file that someone
else writes (the kernel, for a FUSE mount with passthrough writes), committed to the
shared tier at each fsync/close without the bytes passing through Python.

Why: through a FUSE mount every WRITE request used to carry its bytes into the daemon and
through ``OpenFile``'s buffers, which held checkpoints at 0.18 of local disk (issue 41).
A staged file is registered with the kernel as the FUSE *backing file* of the handles, so
the kernel writes it directly, and reads of any handle see its bytes. ``fsync()`` (every
close(2) sends FLUSH, which calls it) keeps the write-back promise: it copies the file's
chunks into new shared-tier objects (``ChunkStore.copy_in``: on a local shared tier an
``O_DIRECT`` write from an aligned buffer, a byte copy by ``splice`` for a tail, never shared
extents; a streamed put on S3/RGW), then commits the chunk map in one journal
transaction, and returns only then. The staged file itself is never an acknowledged
object: the kernel may write it again at any time (another handle, a dup'd descriptor, a
shared mapping), and acknowledged chunks are immutable.

Rules:
- A file is staged only when nothing of it has to be copied in: a new file, or one opened
  with ``O_TRUNC`` that no one else has open (``Workspace.open(..., staged=True)``).
- Which chunks to copy: all of them, when the file changed since the last commit (size,
  mtime or ctime of the staged file differ from the state taken before that commit's copy).
  An unchanged file commits nothing (FLUSH after FSYNC, RELEASE after FLUSH). The check is
  exact where the kernel gives a changed file a timestamp different from the one last read
  (multigrain timestamps, Linux >= 6.13 on ext4/xfs/btrfs/tmpfs, probed by ``Staging``);
  elsewhere a commit counts as certain only when the file's last change was more than
  ``COARSE_NS`` before its state was read, else the next fsync copies again.
- A new file of one chunk under 1 MiB reads it (one ``pread``) and goes the overlapped way of
  ``OpenFile`` (chunk write alongside the record's commit, with the CRC of exactly the bytes
  written); bigger or already journaled files copy their chunks first, then commit.
- A staged file is anonymous (``O_TMPFILE``, else created and unlinked at once): a crash
  leaves nothing to clean up, and loses only what no close acknowledged.
- **Shared writable mappings.** Stores through a mapping change no timestamp once their
  page is dirty and writable, so a store made after a copy into a page dirtied before it
  would never be seen by the (size, mtime, ctime) check. So a file that may be mapped is
  written back before each copy (``sync_file_range``: the kernel cleans its pages and
  write-protects every mapping of them, so the next store faults and moves mtime). "May
  be mapped": the staged inode's atime moved since it was made (``mmap`` touches it, and so
  do reads through the mount; our own descriptor is ``O_NOATIME``), or the staging file
  system does not move atime on mmap (``Staging.atime_seen``: then every file is treated so),
  or a handle of it was opened with ``O_NOATIME`` (``assume_mapped``: its backing file has
  the flag too, and its mappings move no atime).
- **Mappings outlive the last close.** A mapping holds the kernel's backing file, not the
  FUSE file, so the last RELEASE can come while a process still stores through it
  (``open; mmap; close; store; munmap``). ``written_elsewhere`` tells (a write lease on our
  descriptor is refused while any other open of the inode exists, mappings' included); the
  workspace then keeps the file open (``lingering.py``) and commits a full copy once the
  last such open is gone.
- **Reserved space: no torn file from a full staging disk.** The kernel writes a staged file
  without telling us, so a ``write(2)`` that fails there with ENOSPC (a short write, then
  the error) is invisible to the daemon, and the next close would commit the prefix. So
  every staged file gets its blocks before anyone writes: ``fallocate(KEEP_SIZE)`` of
  ``[0, reserved)`` when it is made (``STAGE_RESERVE``, or half of what the disk has left
  if less; none possible: the file is not staged), again after each truncate of ours, and
  further as the kernel writes it: ``ModifyWatch`` hears each write (inotify ``IN_MODIFY``)
  and ``grow`` reserves far ahead of a file past a quarter of its reservation (past its end,
  never more than a quarter of what the disk would have left without them: other files'
  writes need that room), counting the new blocks only if the file was still inside the old
  ones after they were given (``_extend``); at each fsync too. A write inside the
  reservation cannot fail for space; a write that reaches its end may have, and leaves the
  file at least ``reserved`` bytes long (the kernel stops a failed write at the first block
  it cannot get, and a write that started past the end moves nothing). So a file is
  committed only while ``size < reserved``; otherwise the fsync raises ``NoSpace`` (a close
  then reverts the file to its last fsync: as after a failed WRITE on the daemon path). See
  docs/writeback.md, "A full staging disk".
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import mmap
import os
import resource
import signal
import threading
import time
from pathlib import Path

from datahub.errors import InvalidInput, NoSpace, StorageError
from datahub.writeback.files import OpenFile
from datahub.writeback.model import FileSettings
from datahub.writeback.modwatch import ModifyWatch
from datahub.writeback.packs import NO_DESCRIPTORS, PACK_CHUNK_MAX
from datahub.writeback.ports import Committer, NotFresh, Uploader

log = logging.getLogger(__name__)

COARSE_NS = 50_000_000  # older than this, a later change must get another timestamp (coarse clocks)
#: blocks reserved for a new staged file; a file that grows past its reservation between two
#: of its fsyncs is refused at the second (see the module)
STAGE_RESERVE = 64 * 1024**2
#: descriptors no staged file may take: what closes' own writes need (a new pack, a chunk
#: file, a splice pipe per copy in flight), the journal's, the mount's, sockets (``spare_fd``)
FD_RESERVE = 64
#: ``Staging.writes_seen``: a staged file with no reservation; none of its writes can fail unseen
UNRESERVED = 1 << 62
GROW_AT, GROW_BY = 4, 4  # past 1/GROW_AT of its reservation, a file's grows GROW_BY times (``grow``)
AHEAD_SHARE = 4  # blocks a file holds past its end: at most 1/4 of the room (``Staging.ahead``)
_PAGE = mmap.PAGESIZE
_SYNC_FILE_RANGE_WAIT_BEFORE, _SYNC_FILE_RANGE_WRITE = 1, 2
_FALLOC_FL_KEEP_SIZE = 1
_libc = ctypes.CDLL(None, use_errno=True)
_libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def reserve(fd: int, upto: int) -> bool:
    """Give ``fd``'s file every block of ``[0, upto)`` now, its size unchanged
    (``fallocate(FALLOC_FL_KEEP_SIZE)``), so that no write into that range can fail for
    space. False if the disk has not that much left."""
    if upto <= 0 or _libc.fallocate(fd, _FALLOC_FL_KEEP_SIZE, 0, upto) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSPC, errno.EDQUOT):
        return False
    raise OSError(err, os.strerror(err))


def write_protect(fd: int) -> None:
    """Start writing back every dirty page of ``fd``'s file (after any writeback in flight):
    the kernel cleans each page and write-protects it in every shared mapping, so the next
    store through any mapping faults and moves the file's mtime."""
    if _libc.sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WAIT_BEFORE | _SYNC_FILE_RANGE_WRITE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def written_elsewhere(fd: int) -> bool:
    """Whether an open of ``fd``'s inode other than ``fd``'s own exists (another descriptor,
    the kernel's backing file of a FUSE handle or of a mapping): the kernel refuses a write
    lease then (fs/locks.c, ``check_conflicting_open``). Granted, it is dropped at once; a
    break in between (an open racing us) is signalled with SIGURG, which is ignored by
    default, instead of SIGIO, which would end the process."""
    fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EBUSY):
            return True
        raise
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    return False


#: our own reads of a staged file (copies) leave its atime alone: a moved atime means a
#: mapping (or a read through the mount), see ``StagedFile.maybe_mapped``
_FLAGS = os.O_RDWR | os.O_CLOEXEC | os.O_NOATIME


class Staging:
    """Where one workspace's staged files are made (a directory on local disk: the shared
    tier's own file system when it is a local directory, so the copy stays in one file
    system). Copies never share extents with a staged file (``packs.copy_range``): its
    reserved blocks must stay its own, or a rewrite could fail for space unseen."""

    def __init__(self, directory: Path, what: str) -> None:
        self.directory = directory
        self.what = what
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # owner-only, as its files (0600)
        if os.stat(directory).st_mode & 0o077:  # made 0755 by an earlier version
            os.chmod(directory, 0o700)
        self.exact = _changes_always_seen(self)
        self.atime_seen = _mmap_moves_atime(self)
        self.reserves = _reservations_work(self)
        if not self.reserves:
            log.warning(
                "%s: %s cannot reserve blocks (fallocate): no file is staged there, every write "
                "goes through the daemon (a staged file's failed write would go unseen)",
                what, directory,
            )  # fmt: skip
        self._initial: dict[int, int] = {}  # fd -> bytes reserved by new_reserved_fd
        self._open = 0  # staged files made and not yet closed (they share the room: new_reserved_fd)
        self._lock = threading.Lock()
        self.unstaged_for_fds = 0  # files not staged for want of descriptors (``spare_fd``)
        #: every write of the staged files reaches the daemon (a mount's WRITEs answered in C,
        #: docs/writeback.md "WRITEs answered in C"), which records a failed one: the files get
        #: no reservation and no watcher (``UNRESERVED``); set before the first staged file
        self.writes_seen = False
        self._dir_fd = os.open(directory, os.O_PATH | os.O_CLOEXEC)  # for ``_lowest_free``
        #: hears the kernel write staged files, so their reservations grow ahead (``StagedFile.grow``)
        self.watch = ModifyWatch(what)

    def room(self) -> int:
        """Bytes a reservation may take now: half of what the disk has left."""
        st = os.statvfs(self.directory)
        return st.f_bavail * st.f_frsize // 2

    def ahead(self, held: int) -> int:
        """Bytes a growing file may hold reserved past its end, ``held`` of them already:
        a quarter of what the disk would have left without them (``AHEAD_SHARE``). Why
        bounded so: those blocks are nobody's bytes yet, and the growth's multiples
        (``StagedFile.grow``) let a 4 MiB stream hold 16 MiB of a 32 MiB disk, where
        another file's 17 MiB write then failed for space (review11); this way each open
        file leaves the others at least three quarters of the room it found."""
        st = os.statvfs(self.directory)
        return (st.f_bavail * st.f_frsize + held) // AHEAD_SHARE

    def close(self) -> None:
        """Stop the watcher, let the directory go (the workspace's files are closed)."""
        self.watch.close()
        fd, self._dir_fd = self._dir_fd, -1
        if fd >= 0:
            os.close(fd)

    def new_reserved_fd(self) -> int:
        """An empty anonymous file with its first blocks reserved (``STAGE_RESERVE``, or half
        of what the disk has left shared by the staged files open, this one included, if
        less), or -1: the file cannot be staged (no room left for a reservation, a file
        system without ``fallocate``, too few descriptors), so it goes through the daemon.
        ``take_reservation`` tells how much was reserved. Why shared: half of what is left
        each, ten small files open at once held all but 1/1024 of a small disk, and their
        closes' copies into the shared tier on it failed for space their bytes had
        (review11); with the share, n files open leave about 0.56/sqrt(n) of it (1/(2k)
        for the k-th), and a big disk still gives each 64 MiB."""
        if self.writes_seen:  # a failed write is recorded, never committed: nothing to reserve
            fd = self.spare_fd()
            if fd >= 0:
                with self._lock:
                    self._initial[fd] = UNRESERVED
                    self._open += 1
            return fd
        if not self.reserves:
            return -1
        with self._lock:
            sharing = max(1, self._open + 1)  # never below 1, whatever a failed open left
        upto = min(STAGE_RESERVE, self.room() // sharing) // _PAGE * _PAGE
        if upto < _PAGE:
            return -1
        fd = self.spare_fd()
        if fd < 0:
            return -1
        try:
            if not reserve(fd, upto):
                os.close(fd)
                return -1
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            self._initial[fd] = upto
            self._open += 1
        return fd

    def take_reservation(self, fd: int) -> int:
        """The bytes ``new_reserved_fd`` reserved for ``fd`` (0 if none)."""
        with self._lock:
            return self._initial.pop(fd, 0)

    def forget(self, fd: int) -> None:
        """``fd`` was closed without becoming a staged file."""
        with self._lock:
            self._initial.pop(fd, None)
            self._open -= 1

    def gone(self) -> None:
        """A staged file was closed (``StagedFile.closed``): its reservation is freed."""
        with self._lock:
            self._open -= 1

    def spare_fd(self) -> int:
        """A new staged file's descriptor, or -1 when the daemon is short of descriptors: the
        open failed with EMFILE/ENFILE, or took one of the last ``FD_RESERVE`` below the soft
        ``RLIMIT_NOFILE`` (a descriptor is the lowest free number, so then fewer than
        ``FD_RESERVE`` are left). Such a file goes through the daemon for its whole life,
        which holds no descriptor per open file, and the reserve stays for the closes' own
        writes: a staged file only runs them out if descriptors above this one's number
        that were opened before lower ones were freed fill the reserve (a pack, transient
        pipes; long-lived ones are a handful). Counting every open descriptor would be exact
        and cost 0.1 ms per 250 of them (``/proc/self/fd``); this check costs a
        ``getrlimit`` and a ``dup`` (``_lowest_free``), so that a file refused makes no
        staged inode (its ``O_TMPFILE`` open and close cost a refused create 0.5 ms of the
        daemon's CPU: ``bench/writeback/fd_fallback.py --base-tree``)."""
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]

        def spare(number: int) -> bool:
            return number >= 0 and (limit == resource.RLIM_INFINITY or number < limit - FD_RESERVE)

        fd = -1
        if spare(self._lowest_free()):
            try:
                fd = self.new_fd()
            except StorageError as exc:
                if getattr(exc.__cause__, "errno", None) not in NO_DESCRIPTORS:
                    raise
            if fd >= 0 and not spare(fd):  # another thread took the spare ones meanwhile
                os.close(fd)
                fd = -1
        if fd >= 0:
            return fd
        with self._lock:
            self.unstaged_for_fds += 1
            first = self.unstaged_for_fds == 1
        if first:
            log.warning(
                "%s: the daemon has fewer than %d of its %d descriptors (RLIMIT_NOFILE) to spare: "
                "files created while that lasts go through the daemon, not staged (said once; "
                "count in stats()['unstaged_for_fds'])",
                self.what, FD_RESERVE, limit,
            )  # fmt: skip
        return -1

    def _lowest_free(self) -> int:
        """The number the next open would get (the lowest free one: a duplicate of our
        directory's descriptor, closed at once), or -1 if there is none."""
        try:
            probe = fcntl.fcntl(self._dir_fd, fcntl.F_DUPFD_CLOEXEC, 0)
        except OSError as exc:
            if exc.errno in NO_DESCRIPTORS:
                return -1
            raise
        os.close(probe)
        return probe

    def new_fd(self) -> int:
        """An empty anonymous file open for reading and writing."""
        try:
            try:
                return os.open(self.directory, os.O_TMPFILE | _FLAGS, 0o600)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                    raise
            path = self.directory / f"staged-{os.getpid()}-{time.monotonic_ns()}"
            fd = os.open(path, os.O_CREAT | os.O_EXCL | _FLAGS, 0o600)
            os.unlink(path)
            return fd
        except OSError as exc:
            raise StorageError(
                f"cannot make a staged file for {self.what} in {self.directory}: {exc.strerror}; "
                "check that the directory is writable and has space",
                path=str(self.directory),
            ) from exc


def _changes_always_seen(staging: Staging) -> bool:
    """Whether every change of a file after an fstat gets a timestamp other than the one
    that fstat read (multigrain timestamps): 200 one-byte rewrites, each right after an
    fstat, all seen."""
    fd = staging.new_fd()
    try:
        before = os.fstat(fd).st_ctime_ns
        for i in range(200):
            os.pwrite(fd, bytes([i & 0xFF]), 0)
            now = os.fstat(fd).st_ctime_ns
            if now == before:
                return False
            before = now
        return True
    finally:
        os.close(fd)


def _reservations_work(staging: Staging) -> bool:
    """Whether ``fallocate(KEEP_SIZE)`` works here (without it, no staged file)."""
    fd = staging.new_fd()
    try:
        return reserve(fd, _PAGE)
    except OSError:
        return False
    finally:
        os.close(fd)


def _mmap_moves_atime(staging: Staging) -> bool:
    """Whether mapping a staged file moves its atime here (not on a ``noatime`` mount)."""
    fd = staging.new_fd()
    try:
        os.pwrite(fd, b"x", 0)
        before = os.fstat(fd).st_atime_ns
        other = os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
        try:
            mmap.mmap(other, 1, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE).close()
        finally:
            os.close(other)
        return os.fstat(fd).st_atime_ns != before
    except OSError:
        return False
    finally:
        os.close(fd)


class StagedFile(OpenFile):
    """An ``OpenFile`` whose bytes are the staged file ``fd`` (it owns ``fd``)."""

    def __init__(
        self,
        uploads: Uploader,
        commits: Committer,
        conf: FileSettings,
        file_id: int,
        path: str,
        rec: dict,
        fd: int,
        staging: Staging,
    ) -> None:
        super().__init__(uploads, commits, conf, file_id, path, rec)
        self.fd = fd
        self._exact = staging.exact
        atime_seen = staging.atime_seen
        #: every block of [0, reserved) is the file's: a write there cannot fail for space
        self.reserved = staging.take_reservation(fd)
        self._staging = staging
        self._where = staging.directory
        self._reserve_lock = threading.Lock()  # ``reserved`` and ``fd``'s life; a leaf, under _commit_lock
        self._synced: tuple[int, int, int] | None = None  # staged state the journal holds, if certain
        self._atime0 = os.fstat(fd).st_atime_ns if atime_seen else None  # None: treat as maybe mapped
        self.release_lock = threading.Lock()  # the workspace's last-release decision (lingering.py)
        self.lingering = False  # its last reference waits for a mapping to go (lingering.py)
        self._outran = False  # logged once: the writer passed the reservation first
        self.unrestored = False  # a revert could not write the acknowledged bytes back (_restore)
        #: no reservation: every write of it reaches the daemon (``Staging.writes_seen``)
        self._unreserved = self.reserved >= UNRESERVED
        # after every field ``grow`` reads
        self._wd = -1 if self._unreserved else staging.watch.add(fd, self.grow)

    def maybe_mapped(self, st: os.stat_result) -> bool:
        """Whether some process may have mapped the staged file (its atime moved: mmap touches
        it, our own descriptor does not), or we cannot tell."""
        return self._atime0 is None or st.st_atime_ns != self._atime0

    def assume_mapped(self) -> None:
        """Treat the file as maybe mapped from now on: a handle of it was opened with
        ``O_NOATIME``, which the kernel's backing file for that handle takes too, so its
        ``mmap`` moves no atime (wbreview43: such a mapping's stores into pages dirtied before
        a commit were never committed, and ones made after the last close were let go)."""
        self._atime0 = None

    # --- what the handles do ---------------------------------------------------------------------
    def attr(self) -> tuple[int, float]:
        """The staged file's size and mtime; once the last release closed it (``closed``; a
        ``stat`` may have found it open just before), what its last commit left. Under
        ``_reserve_lock``, which ``closed`` takes: an ``fstat`` of the descriptor after it was
        closed failed with EBADF, or read another file's attributes had its number been
        reused meanwhile (review14wb)."""
        with self._reserve_lock:
            if self.fd < 0:
                return self.size, self.mtime
            st = os.fstat(self.fd)
        return st.st_size, st.st_mtime_ns / 1e9

    def read(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0:
            raise InvalidInput(f"read of {self.path!r}: negative offset or size")
        return os.pread(self.fd, size, offset)

    def writes_in_memory(self, offset: int, length: int) -> bool:
        return False  # a write goes to the staged file on disk

    def committed_now(self) -> bool:
        return False  # the kernel may have written the staged file: only fsync can tell (fstat)

    def write(self, offset: int, data: bytes, *, short: bool = False) -> int:
        """``short``: a ``pwrite`` that fails after some bytes were written is a short write,
        as POSIX answers one and the C path does (fastwrite.h): the count written, every byte
        of it in the file; the rest, written again, meets the error and fails (fix21). Why:
        answered with the error, the caller's ``write(2)`` failed though part of it was in the
        file. Only a WRITE that is the caller's ``write(2)`` may be short: for the kernel's
        write-back of cached pages a count is no error and the rest would be dropped, and
        other callers (adoption, ``_restore``) need every byte or the error. The torn-write
        rules are the staged file's as ever (``fsync``: a reserved file written to or past
        its reservation is refused)"""
        if offset < 0:
            raise InvalidInput(f"write to {self.path!r}: negative offset {offset}")
        with memoryview(data) as view:
            done = 0
            while done < len(view):
                try:
                    wrote = os.pwrite(self.fd, view[done:], offset + done)
                except OSError:
                    if short and done > 0:
                        return done
                    raise
                if wrote == 0:  # no progress (a file size limit): as the kernel would say
                    if short and done > 0:
                        return done
                    raise OSError(
                        errno.EFBIG, f"write to {self.path!r} at {offset + done:,} made no progress"
                    )
                done += wrote
        return done

    def truncate(self, size: int) -> None:
        """Truncate, then reserve again: a truncate frees the blocks past ``size`` (ours
        included), and growing leaves a hole, whose writes would need new blocks. So a
        growing truncate reserves first (a write into the hole, which a failure for space
        would leave torn with the size unchanged, finds its blocks there), a shrinking one
        after; a write past ``size`` in between shows in the size and counts as torn."""
        if size < 0:
            raise InvalidInput(f"truncate of {self.path!r}: negative size {size}")
        if self._unreserved:
            with self._commit_lock, self._reserve_lock:
                os.ftruncate(self.fd, size)
                if size == 0:
                    self.unrestored = False
            return
        upto = max(self.reserved, size + min(STAGE_RESERVE, max(size, _PAGE)))
        with self._commit_lock, self._reserve_lock:
            covered = True
            if size > os.fstat(self.fd).st_size:
                self._reserve_past(size, upto)  # the blocks stay the file's when it grows over them
                # no room for the hole: a write into it may fail half done with the size unmoved,
                # which nothing after could see (review11): refused until a truncate finds room
                covered = self.reserved > size
            os.ftruncate(self.fd, size)
            if size == 0:
                self.unrestored = False  # nothing is left that a revert should have put back
            self._reserve_past(size, upto)
            if os.fstat(self.fd).st_size != size or not covered:  # written past ``size`` before
                self.reserved = min(self.reserved, size)  # the blocks were given: maybe torn, refused

    def _reserve_past(self, size: int, upto: int) -> None:
        """Reserve ``[0, upto)`` (rounded up to a page), else as much past ``size`` as one page
        more; if not even that, the reservation ends at 0: every later commit is refused
        until a truncate finds room (the file's bytes past ``size`` are not covered)."""
        upto = -(-upto // _PAGE) * _PAGE
        floor = -(-(size + 1) // _PAGE) * _PAGE
        for want in (upto, floor) if upto > floor else (floor,):
            if reserve(self.fd, want):
                self.reserved = want
                return
        self.reserved = 0

    def grow(self) -> None:
        """The kernel wrote the staged file (``ModifyWatch``'s thread): once it is past a
        quarter of its reservation, reserve far ahead of the writer (to ``max(4 * reserved,
        8 * size)``, past its end at most a quarter of the disk's room: ``Staging.ahead``),
        soundly (``_extend``). Early
        and far: the watcher must win a race against a writer it only hears after each
        call, and blocks are cheap to reserve and free (``fallocate`` of 256 MiB and its
        release: 0.2-0.35 ms of CPU on this VM's ext4, ``bench/writeback/reserve_cost.py``)."""
        with self._reserve_lock:
            if self.fd < 0 or self.reserved <= 0:
                return
            size = os.fstat(self.fd).st_size
            if size >= self.reserved:
                self._log_outran(size, "when the watcher heard it")
            elif GROW_AT * size > self.reserved:
                self._extend(max(GROW_BY * self.reserved, 2 * GROW_BY * size))

    def _extend(self, upto: int) -> None:
        """Reserve ``[0, upto)`` (capped by ``Staging.ahead``: never more than a quarter of
        the room the disk would have without this file's blocks past its end), and count it
        only if the file is still shorter than the old reservation ``R`` *after* the blocks
        were given (``_reserve_lock`` held). Sound: a write that failed for space before the
        ``fallocate`` left the file at least ``R`` long (it could fail only past ``R``, and
        the kernel stops it at the first block it cannot get), and the file system
        serializes ``fallocate`` with buffered writes (the inode lock), so any write after
        it lands in reserved blocks below ``upto``. A writer that outran us (``size >= R``)
        keeps ``R``: refused at close, as without this, never committed torn."""
        old = self.reserved
        if upto <= old:  # most fsyncs' growth (a small file's): no system call
            return
        before = os.fstat(self.fd).st_size
        upto = min(upto, before + self._staging.ahead(max(0, old - before))) // _PAGE * _PAGE
        if upto <= old or not reserve(self.fd, upto):
            return
        size = os.fstat(self.fd).st_size
        if size < old:
            self.reserved = upto
        else:
            self._log_outran(size, f"once {upto - old:,} more bytes were reserved")

    def _log_outran(self, size: int, when: str) -> None:
        """Say once why this file's close will be refused (the operator's question)."""
        if not self._outran:
            self._outran = True
            log.warning(
                "%r: written past its %s reserved bytes (%s bytes %s) before more could be reserved: "
                "its next fsync or close is refused (ENOSPC) unless it is truncated first",
                self.path, f"{self.reserved:,}", f"{size:,}", when,
            )  # fmt: skip

    def closed(self) -> None:
        """The last handle is gone (its close committed): the staged file goes."""
        self._staging.watch.remove(self._wd)
        with self._reserve_lock:  # never while ``grow`` uses the descriptor
            fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)
            self._staging.gone()

    def _restore(self, size: int, mtime: float, chunks: dict[int, tuple[str, int]]) -> None:
        """``revert``: the staged file holds ``chunks`` again. Cut to ``size`` (what no close
        acknowledged past it goes at once), reserved again, then the acknowledged bytes
        written over ``[0, size)`` in place: where the file already has blocks (the common
        case: the bytes a failed write left) no write of ours needs a new one, so readers
        (the kernel serves them from this file) keep a file of the acknowledged length and
        bytes even when the disk is full. Emptying it first, as before, left them reading 0
        bytes of an acknowledged file, and a later extension committed zeros where its bytes
        were (review11). No room for a block the bytes need: the file is ``unrestored`` and
        no commit takes it until a truncate to 0 or its last close (the journal keeps
        ``chunks``, which every later open reads). No room to reserve past ``size``:
        NoSpace, and every commit is refused until a truncate finds room."""
        # from the cut on the file is not what was acknowledged until every chunk is written
        # back: a failure of any kind (no room, the shared tier unreadable: wrongbytes74) leaves
        # it ``unrestored``, which no commit takes. Before, only ENOSPC did: a revert whose chunk
        # reads failed left a torn file (the failed write's bytes, then zeros) that the next
        # close of another handle committed as the file
        self.unrestored = True
        with self._reserve_lock:
            os.ftruncate(self.fd, size)
            if not self._unreserved:
                self._reserve_past(size, max(size + _PAGE, min(self.reserved, STAGE_RESERVE)))
        cs = self.cs
        try:
            for index in range((size + cs - 1) // cs):
                key_len = chunks.get(index)
                self.write(index * cs, self._stored(index, key_len).ljust(min(cs, size - index * cs), b"\0"))
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise NoSpace(
                f"{self.path!r}: no room in {self._where} to restore its last acknowledged "
                f"{size:,} bytes into its staged file; it is committed by nothing until it is "
                "truncated to 0 or closed everywhere (it then reads as the journal holds it)",
                path=self.path,
            ) from None
        self.unrestored = False
        if self.reserved <= size:
            raise NoSpace(
                f"{self.path!r}: its last acknowledged {size:,} bytes are back in its staged file, "
                f"but {self._where} has no room to reserve more: no commit takes it until a "
                "truncate finds room",
                path=self.path,
            )
        st = os.fstat(self.fd)
        if (
            st.st_size != size and not self._unreserved
        ):  # another handle wrote past it before the blocks were given: that
            with self._reserve_lock:  # write may have failed half done (review11): refused until
                self.reserved = min(self.reserved, size)  # a truncate
        os.utime(self.fd, ns=(st.st_atime_ns, int(mtime * 1e9)))  # the atime stays: see maybe_mapped
        st = os.fstat(self.fd)
        certain = self._exact or time.time_ns() - st.st_ctime_ns > COARSE_NS
        self._synced = (st.st_size, st.st_mtime_ns, st.st_ctime_ns) if certain else None

    # --- fsync ---------------------------------------------------------------------------------
    def fsync(self, *, whole: bool = False) -> None:
        """Durable in the shared tier and journaled when this returns (see the module).
        ``whole``: copy even if the file looks unchanged (stores through a mapping that
        outlived the last close leave no trace we could trust)."""
        with self._commit_lock:
            if self.dropped:
                raise self.gone()
            st = os.fstat(self.fd)
            state = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if state == self._synced and not self.pending and not self.unacked and not whole:
                return
            if self.unrestored:
                raise NoSpace(
                    f"{self.path!r}: a revert could not write its acknowledged bytes back into its "
                    f"staged file in {self._where} (no room there, or its chunks could not be read from "
                    "the shared tier); nothing commits it until it is truncated to 0 or closed "
                    "everywhere (it then reads as its last fsync or close left it)",
                    path=self.path,
                )
            if st.st_size >= self.reserved:
                raise NoSpace(
                    f"{self.path!r}: the kernel wrote its staged file past the {self.reserved:,} bytes "
                    f"reserved for it in {self._where} ({st.st_size:,} bytes now), where a write may "
                    "have failed for space without the daemon seeing it; the file is not committed "
                    "(a close reverts it to its last fsync or close). Free space on that disk, or mount "
                    "without --passthrough for files written with no fsync every "
                    f"{STAGE_RESERVE // 2**20} MiB",
                    path=self.path,
                )
            if self.maybe_mapped(st):  # after the fstat, before the copy (see the module)
                write_protect(self.fd)
            certain = self._exact or time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > COARSE_NS
            size, mtime = st.st_size, st.st_mtime_ns / 1e9
            small = 0 < size <= self.cs and size < PACK_CHUNK_MAX
            if not (self.pending and small and self._commit_small(size, mtime)):
                self._commit_copied(size, mtime)
            self.size, self.mtime = size, mtime
            self._synced = state if certain else None
            with self._reserve_lock:  # room for the next stretch of writes (best effort)
                self._extend(-(-2 * size // _PAGE) * _PAGE)

    def _commit_copied(self, size: int, mtime: float) -> None:
        """Copy every chunk into new objects (in parallel, the first in this thread), then
        commit the map. A failed copy leaves nothing referenced; a failed commit leaves its
        chunks for the next commit to drop (``discard``) or recovery to delete."""
        cs = self.cs
        todo = [(i, min(cs, size - i * cs)) for i in range((size + cs - 1) // cs)]
        keys = self._new_keys(todo)  # none reserved if one fails (``_new_keys``)
        futures: list = []
        error: BaseException | None = None
        try:
            for (i, n), key in zip(todo[1:], keys[1:], strict=True):
                futures.append(self.uploads.submit_copy(key, self.fd, i * cs, n, self.path))
        except BaseException as exc:
            error = exc
        if todo and error is None:
            try:
                self.uploads.chunks.copy_in(keys[0], self.fd, 0, todo[0][1], self.path)
            except BaseException as exc:
                error = exc
        for future in futures:  # every copy ends before we return, whatever failed
            try:
                future.result()
            except BaseException as exc:
                error = error or exc
        if error is not None:
            if len(futures) < len(keys) - 1:  # a copy could not be submitted: the first key and
                # those after the last submitted were never written (``ChunkStore.abandon``)
                self.uploads.chunks.abandon([keys[0], *keys[1 + len(futures) :]])
                keys = keys[1 : 1 + len(futures)]
            self.uploads.delete_unreferenced(keys)
            raise error
        chunk_map = {i: (key, n) for (i, n), key in zip(todo, keys, strict=True)}
        try:
            gen = self.commits.commit_file(self.id, self.path, size, mtime, chunk_map)
        except BaseException:
            with self._lock:
                self.discard.extend(keys)
            raise
        self._committed(gen, chunk_map, size, self.changes)  # never bumped: its state is fstat's

    def _commit_small(self, size: int, mtime: float) -> bool:
        """A new file of one small chunk: its record commits while the chunk is written
        (``OpenFile._commit_overlapped``), from one ``pread`` so that the CRC the record
        carries is that of exactly the bytes written. False: go the sequential way."""
        if not self.commits.begin_overlap():
            return False
        try:
            if not self.pending:
                return False
            data = os.pread(self.fd, size, 0)
            if len(data) < size:  # cut short meanwhile: the rest is a hole
                data += bytes(size - len(data))
            key, cover = self.commits.first_key(self.id, self.path, size, mtime, data)
            chunk_map = {0: (key, size)}
            try:
                commit = self.commits.submit_commit(
                    self.id, self.path, size, mtime, chunk_map, [(key, data)], cover
                )
            except BaseException:
                self.uploads.chunks.abandon([key])  # no record names it, nothing wrote it
                raise
            try:
                self.uploads.chunks.write(key, data, self.path, commit.trailer)
                # still ours now that it landed (``Committer.still_held``)
                self.commits.still_held(f"fsync of {self.path!r}")
            except BaseException as exc:
                write_error: BaseException | None = exc
            else:
                write_error = None
            try:
                gen = commit.result()
            except NotFresh:
                self.uploads.delete_unreferenced([key])
                return False
            except BaseException:
                self.uploads.delete_unreferenced([key])
                raise
            if write_error is not None:
                self.commits.undo_fresh(self, gen)
                raise write_error
            self.commits.trust(self.id, gen)
            self._committed(gen, chunk_map, size, self.changes)  # never bumped: its state is fstat's
            return True
        finally:
            self.commits.end_overlap()
