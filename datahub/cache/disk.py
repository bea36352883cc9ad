"""The disk (SSD) tier: one file per page under a directory, indexed in LMDB.

Layout: ``<dir>/pages/<2 hex>/<digest>.page`` (the page format of ``datahub.cache.pages``),
``<dir>/index/`` (LMDB, see ``datahub.cache.index``), ``<dir>/tmp/`` (pages being written;
emptied at start). A page is written to ``tmp`` and renamed into place, so a reader never
sees half a page; every read checks the header (key, etag, size) and the checksum, and a
page that fails is logged, deleted and reported as a miss, so the cache fetches it again.

The budget is ``min(disk_bytes, used + free space - disk_min_free_ratio * file system
size)``: the tier gives way to other users of the disk. ENOSPC while writing is a refused
put, never a failed read.

At start the index is trusted if every process that had it open closed it; otherwise it
is rebuilt by reading the page headers (a crash may have left files the index misses).
"""

from __future__ import annotations

import errno
import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from datahub.cache import pages as fmt
from datahub.cache.index import open_index
from datahub.cache.pages import PageKey
from datahub.cache.tier import BudgetedTier

log = logging.getLogger(__name__)


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
        self._tmp_dir.mkdir(parents=True, exist_ok=True)
        for i in range(256):  # made once here, so a write costs no mkdir
            (self._pages_dir / f"{i:02x}").mkdir(parents=True, exist_ok=True)
        self._pages_prefix = f"{self._pages_dir}/"
        self._tmp_prefix = f"{self._tmp_dir}/{os.getpid()}-"
        self.index = open_index(self.dir / "index")
        self._open()

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
            with open(path, "rb") as fh:
                n = fmt.header_length(fh.read(fmt.PREFIX_LEN))
                if n is None:
                    return None
                fh.seek(0)
                return fmt.parse_header(fh.read(n))
        except OSError:
            return None

    def _path(self, key: PageKey) -> str:
        """The page file (a str: pathlib costs more than the I/O on the hot path)."""
        digest = key.digest
        return f"{self._pages_prefix}{digest[:2]}/{digest}.page"

    # --- hooks -----------------------------------------------------------------------------------
    def _load(self, key: PageKey) -> bytes | None:
        """The page's verified bytes: two reads (header, then data straight into the returned
        bytes object, never sliced out of a bigger one: a slice would copy the page again)."""
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
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
        log.warning(
            "disk cache: page %s of %s (%s) is corrupt: %s; removed, will refetch",
            key.index,
            key.url,
            path,
            problem,
        )
        self.counters.corrupt += 1
        _unlink(path)
        self.index.remove(key.digest)
        return None

    def _store(self, key: PageKey, data: bytes) -> None:
        path = self._path(key)
        tmp = f"{self._tmp_prefix}{uuid.uuid4().hex}"
        try:
            header = fmt.encode_header(key, data)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                written = os.writev(fd, [header, data])
            finally:
                os.close(fd)
            if written != len(header) + len(data):  # a short write: the file system is full
                raise OSError(errno.ENOSPC, f"short write of page file {tmp}")
            os.replace(tmp, path)
        except BaseException:
            _unlink(tmp)
            raise
        try:
            self.index.add(key, len(data))
        except BaseException:
            _unlink(path)  # an unindexed page would use space nobody accounts for
            raise

    def _discard(self, key: PageKey) -> None:
        _unlink(self._path(key))
        self.index.remove(key.digest)

    def _exists(self, key: PageKey) -> bool:
        return os.path.exists(self._path(key))

    def _forget(self, key: PageKey) -> None:
        self.index.remove(key.digest)

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
        """Adopt pages other processes added (when the index says we are far behind), then evict."""
        shared_used = self.index.used()
        if shared_used > self.high * self.limit() and shared_used > 1.1 * self._used:
            fresh = dict(self.index.entries())
            with self._lock:
                for key, size in fresh.items():
                    if key not in self._sizes and key not in self._pending:
                        self._sizes[key] = size
                        self._used += size
                        self.policy.on_insert(key, size)
        super().maintain()

    def close(self) -> None:
        self.index.close()


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
