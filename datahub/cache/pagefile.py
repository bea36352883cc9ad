"""Writing one page file of the disk tier whole: the one writer, used by the disk tier and
by fetch worker processes (``datahub.cache.fetch_workers``).

Why a module of its own: a fetch worker writes page files into the daemon's disk-tier
directory without being a disk tier (it keeps no index, evicts nothing, never deletes), and
a second writer would drift from the first. The file is written unnamed (``O_TMPFILE``) and
linked to its final name (``linkat`` through ``/proc/self/fd``), so a reader never sees half
a page and a process killed while writing leaves nothing; where the file system or kernel
lacks ``O_TMPFILE`` it is written to ``tmp/`` and renamed into place. Format 3 (the file is
the page's bytes, its header in the xattr ``user.datahub.page``) where the file system keeps
user xattrs, else format 2 (header, then data). Pages of at least 1 MiB are written with
``O_DIRECT`` (``datahub.cache.directio``) until the file system refuses it.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
import uuid
from pathlib import Path

from datahub.cache import pages as fmt
from datahub.cache.directio import DIRECT_MIN_BYTES, write_direct
from datahub.cache.pages import PageKey

log = logging.getLogger(__name__)

#: What a page file is verified in: (st_dev, st_ino, st_size, st_ctime_ns, st_mtime_ns).
FileState = tuple[int, int, int, int, int]

#: Page files are the cached bytes of every dataset and bucket, whoever asked for them: only the
#: cache's owner may read them (docs/cache.md, "Who may read the cache's files"). Passed at
#: create, so no umask widens it.
FILE_MODE = 0o600
#: The cache's directories: a second uid may neither list nor enter them.
DIR_MODE = 0o700

# An mtime older than this is past any clock tick: a later write cannot stamp it (``settled_stat``).
SETTLED_NS = 500_000_000


def file_state(st: os.stat_result) -> FileState:
    """The state every later check of a page file compares with the one it was verified in."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_ctime_ns, st.st_mtime_ns)


def settled_stat(fd: int) -> os.stat_result:
    """The file's ``fstat``, its mtime first set to a moment already past if it is recent.

    Why: a write stamps a file with the kernel's current time, which is coarse (a clock tick,
    several ms) on kernels before 6.13 and on file systems without multigrain timestamps. A
    write landing in the tick of the state taken here would leave that state as it was, and
    the changed file would be handed out as verified. No write can stamp a time already past,
    so with an mtime older than a tick any later write shows, on every kernel. An older mtime
    is left alone: another process holding the file as verified would see its ctime move and
    read it again. Raises OSError (EPERM) for a recent file this process does not own."""
    st = os.fstat(fd)
    now = time.time_ns()
    if st.st_mtime_ns > now - SETTLED_NS:
        os.utime(fd, ns=(now, now - 2 * SETTLED_NS))
        st = os.fstat(fd)
    return st


class PageWriter:
    """Writes page files under ``<directory>/pages`` (sub-directories made by the disk tier)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self._pages_dir = self.dir / "pages"
        self._tmp_dir = self.dir / "tmp"
        self.pages_prefix = f"{self._pages_dir}/"
        self.tmp_prefix = f"{self._tmp_dir}/{os.getpid()}-"
        self.pages_fd = os.open(self._pages_dir, os.O_RDONLY | os.O_DIRECTORY)
        self.tmpfile = self._tmpfile_works()
        self.direct = True  # until the file system refuses O_DIRECT
        self.xattr_pages = self._probe_xattr()  # format 3: the file is the page's bytes

    def write(self, key: PageKey, data: bytes, *, header: bytes | None = None) -> FileState | None:
        """Write the page file of ``key`` whole under its final name. Returns the file's
        state after naming it (naming moves the ctime): the state in which its bytes were
        checksummed. None when it went through ``tmp/`` and a rename: the name may already
        hold another process's file by the time it could be looked at. ``header``: the
        page's ``encode_header``, if the caller made it already (it holds the checksum)."""
        name = name_of(key)
        header = fmt.encode_header(key, data) if header is None else header
        # format 3: the header goes to the xattr, the file is the data alone
        xattr, header = (header, b"") if self.xattr_pages else (None, header)
        if self.tmpfile:
            return self._store_unnamed(name, header, data, xattr)
        return self._store_renamed(name, header, data, xattr)

    def _probe_xattr(self) -> bool:
        """Whether this file system keeps user xattrs on page files (format 3, passthrough)."""
        probe = f"{self.tmp_prefix}xattr-probe"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            os.setxattr(fd, fmt.XATTR, b"probe")
            return os.getxattr(fd, fmt.XATTR) == b"probe"
        except OSError as exc:
            log.info(
                "disk cache %s: no user xattrs (%s): format-2 page files, no FUSE passthrough", self.dir, exc
            )
            return False
        finally:
            os.close(fd)
            unlink(probe)

    def _tmpfile_works(self) -> bool:
        """Whether this file system and kernel create unnamed files that ``linkat`` can name
        (``O_TMPFILE``, and /proc to name the open file); else pages go through ``tmp/``."""
        probe = f"{self.tmp_prefix}probe"
        try:
            fd = os.open(".", os.O_WRONLY | os.O_TMPFILE, FILE_MODE, dir_fd=self.pages_fd)
        except (OSError, AttributeError):
            return False
        try:
            os.link(f"/proc/self/fd/{fd}", probe, dst_dir_fd=self.pages_fd)  # dir fd: linkat, follows
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
            unlink(probe)

    def _store_unnamed(self, name: str, header: bytes, data: bytes, xattr: bytes | None) -> FileState | None:
        """Write an unnamed file, then give it its name: a crash before that leaves nothing.

        Its state after naming is returned only if its bytes did not move meanwhile (None
        otherwise). Why: once named, any process may write the file before that ``fstat``,
        which would then record a changed file as the checksummed one, and backing files
        would hand it to the kernel as verified for good (seen: a test's byte flip landing in
        that window under load served wrong bytes). Nothing else can reach the file before it
        is named; its mtime is set in the past then (``settled_stat``), so any write after it, in the
        window or later, moves the mtime."""
        fd, direct = self._open_unnamed(direct=self.direct and len(data) >= DIRECT_MIN_BYTES)
        try:
            if direct:
                self._write_direct(fd, header, data, name)
            else:
                write_all(fd, header, data, name)
            if xattr is not None:
                os.setxattr(fd, fmt.XATTR, xattr)
            unnamed = settled_stat(fd)
            try:
                os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=self.pages_fd)
            except FileExistsError:  # another process stored it: replace it, as a rename would
                tmp = f"{self.tmp_prefix}{uuid.uuid4().hex}"
                os.link(f"/proc/self/fd/{fd}", tmp, dst_dir_fd=self.pages_fd)
                try:
                    os.replace(tmp, self.pages_prefix + name)
                except BaseException:
                    unlink(tmp)
                    raise
            named = os.fstat(fd)  # after the link: naming a file moves its ctime, not its mtime
            if (named.st_ino, named.st_size, named.st_mtime_ns) != (
                unnamed.st_ino,
                unnamed.st_size,
                unnamed.st_mtime_ns,
            ):
                return None  # written to since its checksum: its first open reads it and checks it
            return file_state(named)
        finally:
            os.close(fd)

    def _open_unnamed(self, *, direct: bool) -> tuple[int, bool]:
        flags = os.O_WRONLY | os.O_TMPFILE
        if direct:
            try:
                return os.open(".", flags | os.O_DIRECT, FILE_MODE, dir_fd=self.pages_fd), True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._no_direct(exc)
        return os.open(".", flags, FILE_MODE, dir_fd=self.pages_fd), False

    def _write_direct(self, fd: int, header: bytes, data: bytes, name: str) -> None:
        try:
            write_direct(fd, header, data, name)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self._no_direct(exc)  # the file system refused the alignment: write it buffered
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            write_all(fd, header, data, name)

    def _no_direct(self, exc: OSError) -> None:
        if self.direct:
            log.info("disk cache %s: O_DIRECT refused (%s); large pages are written buffered", self.dir, exc)
        self.direct = False

    def _store_renamed(self, name: str, header: bytes, data: bytes, xattr: bytes | None) -> None:
        tmp = f"{self.tmp_prefix}{uuid.uuid4().hex}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            try:
                write_all(fd, header, data, tmp)
                if xattr is not None:
                    os.setxattr(fd, fmt.XATTR, xattr)
            finally:
                os.close(fd)
            os.replace(tmp, self.pages_prefix + name)
        except BaseException:
            unlink(tmp)
            raise

    def close(self) -> None:
        if self.pages_fd >= 0:
            os.close(self.pages_fd)
            self.pages_fd = -1


def name_of(key: PageKey) -> str:
    """A page file's path relative to ``pages/``."""
    return f"{key.digest[:2]}/{key.digest}.page"


def write_all(fd: int, header: bytes, data: bytes, what: str) -> None:
    written = os.writev(fd, [header, data])
    if written != len(header) + len(data):  # a short write: the file system is full
        raise OSError(errno.ENOSPC, f"short write of page file {what}")


def unlink(path: str, dir_fd: int | None = None) -> None:
    try:
        os.unlink(path, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
