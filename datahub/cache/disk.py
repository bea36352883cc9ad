"""The disk (SSD) tier: one file per page under a directory, indexed in LMDB.

A page file holds exactly the page's bytes from offset 0 (format 3) and its header (the
format-2 header of ``datahub.cache.pages``: name, length, checksum) in the extended
attribute ``user.datahub.page``. Why: a one-page object's file is then the object itself,
so a FUSE mount can hand it to the kernel as a passthrough backing file
(``datahub.cache.backing``) and reads never reach the daemon. A file system without user
xattrs gets format-2 files (header, then data), which read the same but cannot back a
passthrough open. A page file without the attribute is read as format 2 (or 1).

Layout: ``<dir>/pages/<2 hex>/<digest>.page`` (the page format of ``datahub.cache.pages``),
``<dir>/index/`` (LMDB, see ``datahub.cache.index``), ``<dir>/tmp/`` (pages being written
where ``O_TMPFILE`` is unavailable; emptied at start). A page is written to an unnamed file
(``O_TMPFILE``) and linked into place whole, or written to ``tmp`` and renamed into place,
so a reader never sees half a page; every read checks the header (key, etag, size) and the
checksum, and a page that fails is logged, deleted and reported as a miss, so the cache
fetches it again.

Why ``O_TMPFILE`` + ``linkat``: a cold read writes one small file per page, and creating a
named temporary file and renaming it across directories costs two directory updates (and
lock contention on ``tmp/`` among 16 writer threads); an unnamed file needs one, and a
crash leaves nothing behind. Paths are resolved relative to an open ``pages/`` directory.

The budget is ``min(disk_bytes, used + free space - disk_min_free_ratio * file system
size)``: the tier gives way to other users of the disk. ENOSPC while writing is a refused
put, never a failed read.

Pages of at least 1 MiB are written with ``O_DIRECT`` (``datahub.cache.directio``): the RAM
tier already holds them, and a second copy in the kernel's page cache costs system time
and evicts the reader's own cached files. Smaller pages are written buffered.

Index inserts are deferred and batched (datahub.cache.indexbatch): after a crash a page
file may exist without an index entry. At start the index is trusted if every process that
had it open closed it (closing flushes the batch); otherwise it is rebuilt by reading the
page headers, which finds such files (and drops entries whose file is gone).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from datahub.cache import pages as fmt
from datahub.cache.index import open_index
from datahub.cache.indexbatch import IndexBatcher
from datahub.cache.pagefile import DIR_MODE, FILE_MODE, FileState, PageWriter, file_state
from datahub.cache.pagefile import unlink as _unlink
from datahub.cache.pages import PageKey
from datahub.cache.tier import BudgetedTier, tier_failure

log = logging.getLogger(__name__)

#: How page files are opened: never through a symlink, never waiting. Why: a FIFO at a page
#: file's name (or a symlink to one) blocked ``open`` until some writer came, a cache read for
#: ever and, since the FUSE loop asks for a verified backing file inline, a whole mount. Such a
#: name is now an error (ELOOP) or reads nothing (ESPIPE): a miss, and the page's fill puts its
#: file back in place (``tests/cache/test_integrity14.py``).
PAGE_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK


#: seconds ``close`` waits for the page stores under way (``BudgetedTier.stop_storing``)
STORES_AT_CLOSE_S = 10.0


class DiskTier(BudgetedTier):
    persistent = True

    def __init__(
        self,
        directory: str | os.PathLike[str],
        budget: int,
        policy,
        *,
        min_free_ratio: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
        **options,
    ) -> None:  # options: see BudgetedTier
        super().__init__("disk", budget, policy, **options)
        self.dir = Path(directory)
        self.min_free_ratio = min_free_ratio
        self._clock = clock
        self._limit_at = -1e18
        self._limit_value = budget
        self._pages_dir = self.dir / "pages"
        self._tmp_dir = self.dir / "tmp"
        self._make_private()
        self._pages_prefix = f"{self._pages_dir}/"
        self._tmp_prefix = f"{self._tmp_dir}/{os.getpid()}-"
        self._writer = PageWriter(self.dir)  # the one page-file writer (fetch workers use it too)
        self._pages_fd = self._writer.pages_fd
        #: called with (key, fstat) of each first page this process wrote in format 3: bytes
        #: it checksummed itself, so a passthrough open need not read them back (datahub.cache.backing)
        self.on_written: Callable[[PageKey, FileState], None] | None = None
        #: called with the stat of each first page file this process evicts, before it is
        #: unlinked: a mount holding it as a passthrough backing file lets it go (its space)
        self.on_discarded: Callable[[os.stat_result], None] | None = None
        self.index = open_index(self.dir / "index")
        self._index = IndexBatcher(self.index, self._index_failed)
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    # --- start: the directories, owner-only -----------------------------------------------------
    def _make_private(self) -> None:
        """Make the tier's directories (mode 0700), and tighten those an earlier version left open.

        Why: a page file holds bytes of whatever dataset or bucket a mount read, fetched with
        the mount's credentials; a second local user who can enter the directory reads them
        all, whatever their own access. Earlier versions made the directories with the umask
        (0755) and page files 0644: when the tier's root is found open to group or others, every
        page file under it is made 0600 too, once (a walk of the tier, logged). Paths owned by
        another uid are left as they are (chmod would fail) and logged."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        was_open = _tighten(self.dir, DIR_MODE)
        for directory in (self._tmp_dir, self._pages_dir, self.dir / "index"):
            directory.mkdir(exist_ok=True, mode=DIR_MODE)
            _tighten(directory, DIR_MODE)
        for i in range(256):  # made once here, so a write costs no mkdir
            sub = self._pages_dir / f"{i:02x}"
            sub.mkdir(exist_ok=True, mode=DIR_MODE)
            _tighten(sub, DIR_MODE)
        if was_open:
            started, files = time.monotonic(), 0
            for sub in self._pages_dir.iterdir():
                for path in sub.iterdir():
                    files += _tighten(path, FILE_MODE)
            log.warning(
                "disk cache %s: was readable by other users; made owner-only (%d page files, %.1fs)",
                self.dir,
                files,
                time.monotonic() - started,
            )

    # --- start: check or rebuild the index ------------------------------------------------------
    def _open(self) -> None:
        trusted = self.index.attach()
        for leftover in self._tmp_dir.iterdir():
            if leftover.name.startswith(f"{os.getpid()}-") or not trusted:
                leftover.unlink(missing_ok=True)
        if not trusted:
            started = time.monotonic()
            entries = list(self._scan())
            self.index.replace_all(entries)
            log.warning(
                "disk cache %s: index rebuilt from %d page files in %.1fs (a previous process did not close it)",
                self.dir,
                len(entries),
                time.monotonic() - started,
            )
        for key, size in self.index.entries():
            self._sizes[key] = size
            self._used += size
            self.policy.on_insert(key, size)

    def _scan(self):
        for sub in self._pages_dir.iterdir():
            for path in sub.iterdir():
                header = self._read_header(path)
                key = header.key() if header is not None else None
                if key is None:
                    log.warning("disk cache: removing unreadable page file %s", path)
                    path.unlink(missing_ok=True)
                    continue
                if path.name != f"{key.digest}.page":
                    path.unlink(missing_ok=True)
                    continue
                yield key, header.size

    @staticmethod
    def _read_header(path: Path) -> fmt.PageHeader | None:
        try:
            with open(os.open(path, PAGE_OPEN), "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    return None  # a FIFO, a device: unreadable, removed
                head = _xattr_header(fh.fileno())
                if head is not None:
                    return fmt.parse_header(head)
                n = fmt.header_length(fh.read(fmt.PREFIX_LEN))
                if n is None:
                    return None
                fh.seek(0)
                return fmt.parse_header(fh.read(n))
        except OSError:
            return None

    def _path(self, key: PageKey) -> str:
        """The page file (a str: pathlib costs more than the I/O on the hot path)."""
        return self._pages_prefix + _name(key.digest)

    # the writer's probes and fallbacks, as attributes of the tier (tests set them)
    @property
    def xattr_pages(self) -> bool:
        return self._writer.xattr_pages

    @property
    def _tmpfile(self) -> bool:
        return self._writer.tmpfile

    @_tmpfile.setter
    def _tmpfile(self, value: bool) -> None:
        self._writer.tmpfile = value

    @property
    def _direct(self) -> bool:
        return self._writer.direct

    @_direct.setter
    def _direct(self, value: bool) -> None:
        self._writer.direct = value

    # --- hooks -----------------------------------------------------------------------------------
    def _load(self, key: PageKey) -> bytes | None:
        """The page's verified bytes: two reads (header, then data straight into the returned
        bytes object, never sliced out of a bigger one: a slice would copy the page again)."""
        name = _name(key.digest)
        try:
            fd = os.open(name, PAGE_OPEN, dir_fd=self._pages_fd)
        except FileNotFoundError:
            return None
        try:
            head = _xattr_header(fd) if self.xattr_pages else None
            if head is not None:  # format 3: the data is the whole file
                header = fmt.parse_header(head)
                size = header.size if header is not None else -1
                # one byte more than the page: a longer file is damaged (a passthrough
                # reader would see the extra bytes)
                data = os.pread(fd, size + 1, 0) if 0 <= size <= key.page_size else b""
            else:
                head = os.pread(fd, fmt.header_size(key), 0)  # a format-2 header of this key exactly
                n = fmt.header_length(head)
                if n is not None and n != len(head):  # another format or another name: reread
                    head = os.pread(fd, n, 0)
                header = fmt.parse_header(head) if n is not None else None
                size = header.size if header is not None else -1
                data = os.pread(fd, size, n) if 0 <= size <= key.page_size else b""
        finally:
            os.close(fd)
        problem = fmt.check_page(key, header, data)
        if problem is None:
            return data
        self._corrupt(key, name, problem)
        return None

    def open_backing(self, key: PageKey) -> tuple[int, fmt.PageHeader] | None:
        """An fd (O_RDONLY) of the page file and its header, when the file is format 3 (the
        page's bytes from offset 0): a FUSE passthrough backing file. Not yet verified:
        ``datahub.cache.backing`` checks it. None if absent or not format 3.

        A page this tier does not know (not in its index: a cold file, or one another
        process stored and this one has not read yet) is None without a system call: the
        FUSE loop asks at every OPEN, inline, and a probe of a missing file there released
        the GIL to the fetch threads once per cold file. The ordinary read path still finds
        another process's page (``get`` probes the file), and the next open passes through."""
        if not self.xattr_pages or key not in self._sizes:
            return None
        try:
            fd = os.open(_name(key.digest), PAGE_OPEN, dir_fd=self._pages_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP):  # absent, or a symlink: no backing file
                return None
            raise
        try:
            head = _xattr_header(fd)
            header = fmt.parse_header(head) if head is not None else None
        except OSError:
            header = None
        if header is None:
            os.close(fd)
            return None
        return fd, header

    def touch(self, keys: Iterable[PageKey]) -> None:
        """Hits that did not go through ``get`` (passthrough opens of the page files, and
        READs answered in C): counted and shown to the policy under one lock."""
        with self._lock:
            sizes = self._sizes
            stored = [key for key in keys if key in sizes]
            self.policy.on_hits(stored)  # one call for the batch (thousands a second)
        if stored:
            self.counters.add("hits", len(stored))

    def corrupt(self, key: PageKey, problem: str) -> None:
        """A page file found damaged outside ``get`` (a backing file that failed its check)."""
        self._corrupt(key, _name(key.digest), problem)
        with self._lock:
            size = self._sizes.pop(key, None)
            if size is not None:
                self._used -= size
                self.policy.on_remove(key)

    def _corrupt(self, key: PageKey, name: str, problem: str) -> None:
        log.warning(
            "disk cache: page %s of %s (%s) is corrupt: %s; removed, will refetch",
            key.index,
            key.url,
            self._pages_prefix + name,
            problem,
        )
        self.counters.add("corrupt")
        _unlink(name, self._pages_fd)
        self._index.remove(key.digest)

    def _store(self, key: PageKey, data: bytes) -> None:
        written = self._writer.write(key, data)
        self._stored(key, len(data), written)

    def _stored(self, key: PageKey, size: int, written: FileState | None) -> None:
        """A page file is in place (written by this process or by a fetch worker from bytes
        it had just checksummed): index it, and remember a first page in format 3 as a
        verified backing file in the state it was left in (``written``; None: not known)."""
        if written is not None and self.xattr_pages and self.on_written is not None and key.index == 0:
            self.on_written(key, written)
        self._index.add(key, size)  # batched: a crash before the flush means a rebuild

    def load_written(self, key: PageKey, size: int, state: FileState | None) -> bytes | None:
        """The bytes of a page file a fetch worker wrote from bytes it had just checksummed,
        if the file is still in the state the worker reported (any change since moves its
        ctime, mtime or inode, as for a verified backing file), else None. Without a state (a
        renamed or format-2 file) the file is read and checked whole, as ``get`` does."""
        with tier_failure(self, "read", key):
            if state is None or not self.xattr_pages:
                return self._load(key)
            return self._load_unchanged(key, size, state)
        return None

    def _load_unchanged(self, key: PageKey, size: int, state: FileState) -> bytes | None:
        try:
            fd = os.open(_name(key.digest), PAGE_OPEN, dir_fd=self._pages_fd)
        except FileNotFoundError:
            return None
        try:
            st = os.fstat(fd)
            if file_state(st) != state or st.st_size != size:
                return None
            data = os.pread(fd, size, 0)
        finally:
            os.close(fd)
        return data if len(data) == size else None

    def stored_elsewhere(self, key: PageKey, size: int, state: FileState | None) -> None:
        """A fetch worker stored this page (after ``reserve``): index it as if written here."""
        self._stored(key, size, state)

    def _index_failed(self, entries: list[tuple[PageKey, int]]) -> None:
        """The index refused a batch: remove those files, so no bytes exist that nobody accounts for."""
        for key, _ in entries:
            _unlink(_name(key.digest), self._pages_fd)
            self.lost(key)

    def _discard(self, key: PageKey) -> None:
        if self.on_discarded is not None and key.index == 0:
            try:
                self.on_discarded(os.stat(_name(key.digest), dir_fd=self._pages_fd))
            except FileNotFoundError:
                pass
        _unlink(_name(key.digest), self._pages_fd)
        self._index.remove(key.digest)

    def _exists(self, key: PageKey) -> bool:
        try:
            os.stat(_name(key.digest), dir_fd=self._pages_fd)
            return True
        except FileNotFoundError:
            return False

    def _forget(self, key: PageKey) -> None:
        self._index.remove(key.digest)

    def stats(self) -> dict:
        """The tier's figures, and ``index_rebuilds``: how often a process sharing the directory
        rebuilt the index because one that held it ended without closing it."""
        out = super().stats()
        with tier_failure(self, "check", "the index", counted=False):
            out["index_rebuilds"] = self.index.rebuilds()
        return out

    def flush_index(self) -> None:
        """Write every batched index insert now (other processes and ``cache stats`` see them)."""
        self._index.flush()

    def limit(self) -> int:
        now = self._clock()
        if now - self._limit_at >= 1.0:
            try:
                st = os.statvfs(self.dir)
                total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
                room = self._used + free - int(self.min_free_ratio * total)
                self._limit_value = max(0, min(self.budget, room))
            except OSError:
                self._limit_value = self.budget
            self._limit_at = now
        return self._limit_value

    def maintain(self) -> None:
        """Flush batched index inserts, adopt pages other processes added (when the index
        says we are far behind), then evict."""
        self._index.flush(wait=False)
        shared_used = self.index.used()
        if shared_used > self.high * self.limit() and shared_used > 1.1 * self._used:
            fresh = dict(self.index.entries())
            with self._lock:
                for key, size in fresh.items():
                    if key not in self._sizes and key not in self._pending and key not in self._evicting:
                        self._sizes[key] = size
                        self._used += size
                        self.policy.on_insert(key, size)
        super().maintain()

    def close(self) -> None:
        if self._pages_fd < 0:
            return
        if not self.stop_storing(STORES_AT_CLOSE_S):  # else its index entry would be lost
            log.warning(
                "disk cache %s: pages still being stored after %.0f s at close; their files may "
                "be counted only once a process rebuilds or adopts them",
                self.dir,
                STORES_AT_CLOSE_S,
            )
        index = getattr(self, "index", None)
        if index is not None:
            try:
                self._index.flush()
            finally:
                index.close()
        self._writer.close()
        self._pages_fd = -1


def _name(digest: str) -> str:
    """A page file's path relative to ``pages/``."""
    return f"{digest[:2]}/{digest}.page"


def _xattr_header(fd: int) -> bytes | None:
    """The format-3 header of an open page file, or None if it has none (format 2 or 1)."""
    try:
        return os.getxattr(fd, fmt.XATTR)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP):
            return None
        raise


def _tighten(path: Path, mode: int) -> bool:
    """Set ``path``'s mode to ``mode`` if it grants group or others anything; whether it did.

    Symbolic links are followed (a tier's directory may be one); a path gone meanwhile (a page
    evicted by another process) is nothing to do. A path owned by another uid is logged and
    left: only its owner may chmod it."""
    try:
        st = os.stat(path)
        if not st.st_mode & 0o077 or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return False
        if st.st_uid != os.geteuid():
            log.warning(
                "disk cache: %s (mode %o) belongs to uid %d, not this process: left as it is",
                path,
                stat.S_IMODE(st.st_mode),
                st.st_uid,
            )
            return False
        os.chmod(path, mode)
    except FileNotFoundError:
        return False
    return True
