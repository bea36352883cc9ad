"""The disk tier's LMDB index: which pages exist, how many bytes they use, and the pins.

The only module of the read cache that imports ``lmdb``. LMDB is safe across processes,
so a CLI prefetch and a mount daemon can share one cache directory. The index is a
cache of the truth held by the page files themselves (their headers), so it is written
without fsync and rebuilt from the files whenever a process that had it open died
without closing it (its pid is still registered as a holder).

Databases: ``pages`` digest -> JSON (url, etag, page_size, index, size[, true]: ``_entry``);
``pins`` pin name NUL object id -> b""; ``meta`` used bytes, pin generation, holders.
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import lmdb

from datahub.cache.pagefile import DIR_MODE, FILE_MODE
from datahub.cache.pages import PageKey
from datahub.errors import StorageError
from datahub.lmdb_fork import close_inherited, transaction, using
from datahub.procs import pid_alive

_INT = struct.Struct(">q")
_USED = b"used"
_PIN_GEN = b"pin_generation"
_HOLDER = b"holder:"
_REBUILDS = b"rebuilds"  # how many times the index was rebuilt from the page files (``rebuilds``)


_OPEN: dict[str, PageIndex] = {}  # "<pid>:<path>" -> the open index
_OPEN_LOCK = threading.Lock()


def open_index(path: Path) -> PageIndex:
    """The process's one PageIndex for ``path`` (refcounted; close it once per open).

    LMDB must not be opened twice in one process (closing one handle would drop the
    other's locks), yet a process may hold a cache and an fsspec file system at once.
    """
    key = f"{os.getpid()}:{path.resolve()}"  # a forked child must not reuse its parent's handle
    with _OPEN_LOCK:
        index = _OPEN.get(key)
        if index is None:
            for stale in [k for k in _OPEN if k.partition(":")[2] == key.partition(":")[2]]:
                if not _OPEN.pop(stale)._drop_inherited():  # inherited through fork: lmdb opens a path once
                    raise StorageError(
                        f"cannot open the disk cache index at {path} in this forked process: a "
                        "thread of its parent had a transaction of it open at the fork, so the "
                        "parent's handle stays open here (datahub.lmdb_fork); open the cache "
                        "before the parent reads through it, or use the start method 'spawn'"
                    )
            index = _OPEN[key] = PageIndex(path)
        index._refs += 1
        return index


def _after_fork_in_child() -> None:
    """A fresh lock for the child: a parent thread may have held ``_OPEN_LOCK`` at the fork.

    The parent's open indexes stay in ``_OPEN`` (under the parent's pid) until the child opens
    the same path; the child never unregisters the parent's claim (``PageIndex.close``)."""
    global _OPEN_LOCK
    _OPEN_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class PageIndex:
    def __init__(self, path: Path, map_size: int = 4 * 1024**3) -> None:
        self._key = f"{os.getpid()}:{path.resolve()}"
        self._refs = 0
        self._attached = False
        path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        try:  # owner-only, as the page files it names (datahub.cache.pagefile.FILE_MODE)
            self._env = lmdb.open(
                str(path), map_size=map_size, max_dbs=4, sync=False, metasync=False, mode=FILE_MODE
            )
        except lmdb.Error as exc:
            raise StorageError(
                f"cannot open the disk cache index at {path}: {exc}; delete the directory to rebuild it"
            ) from exc
        with using(self._env):
            self._pages = self._env.open_db(b"pages")
            self._pins = self._env.open_db(b"pins")
            self._meta = self._env.open_db(b"meta")
        self._pid = os.getpid()

    # --- lifecycle: is the index trustworthy? ---------------------------------------------------
    def attach(self) -> bool:
        """Register this process; True if the index can be trusted (no holder died holding it)."""
        if self._attached:  # another tier of this process attached (and checked) already
            return True
        with transaction(self._env, write=True, db=self._meta) as txn:
            dead = []
            for key, _ in txn.cursor():
                if key.startswith(_HOLDER) and not pid_alive(int(key[len(_HOLDER) :])):
                    dead.append(key)
            for key in dead:
                txn.delete(key)
            txn.put(_HOLDER + str(self._pid).encode(), b"")
        self._attached = True
        return not dead

    def close(self) -> None:
        """Release one open; the last one unregisters this process and closes LMDB.

        In a forked child, the parent's index (inherited) is only let go: the claim is the
        parent's, who still reads and writes under it. Why: a child (a DataLoader worker)
        closing an inherited cache deleted the parent's holder entry, so after the parent was
        killed the next process trusted an index that missed the parent's last pages."""
        if self._pid != os.getpid():
            with _OPEN_LOCK:
                if _OPEN.get(self._key) is self:
                    del _OPEN[self._key]
            self._drop_inherited()
            return
        with _OPEN_LOCK:
            self._refs -= 1
            if self._refs > 0:
                return
            _OPEN.pop(self._key, None)
        if self._attached:
            with transaction(self._env, write=True, db=self._meta) as txn:
                txn.delete(_HOLDER + str(self._pid).encode())
        with using(self._env):
            self._env.close()

    def _drop_inherited(self) -> bool:
        """Close a forked child's copy of the parent's LMDB handle, leaving the index's
        holders (the parent's claim) as they are. Closing it is what lets the child open
        the path itself (lmdb refuses a second handle in one process). It is safe only
        because no transaction of the parent was open at the fork (``datahub.lmdb_fork``):
        closing aborted those in the reader table both processes share, and the parent's
        open snapshot then read pages its writer had reused. False: one was, the handle
        stays open."""
        if self._pid == os.getpid():  # the opener's own handle: only ``close`` releases it
            return True
        self._attached = False
        return close_inherited(self._env)

    # --- pages -----------------------------------------------------------------------------------
    def add(self, key: PageKey, size: int) -> None:
        value = _entry(key, size)
        with transaction(self._env, write=True) as txn:
            if txn.put(key.digest.encode(), value, db=self._pages, overwrite=False):
                self._bump(txn, _USED, size)

    def add_many(self, entries: Iterable[tuple[PageKey, int]]) -> None:
        """``add`` for many pages in ONE write transaction (datahub.cache.indexbatch)."""
        added = 0
        with transaction(self._env, write=True) as txn:
            for key, size in entries:
                value = _entry(key, size)
                if txn.put(key.digest.encode(), value, db=self._pages, overwrite=False):
                    added += size
            if added:
                self._bump(txn, _USED, added)

    def remove(self, digest: str) -> None:
        with transaction(self._env, write=True) as txn:
            raw = txn.pop(digest.encode(), db=self._pages)
            if raw is not None:
                self._bump(txn, _USED, -json.loads(raw)[4])

    def entries(self) -> Iterator[tuple[PageKey, int]]:
        with transaction(self._env, db=self._pages) as txn:
            for _, raw in txn.cursor():
                url, etag, page_size, index, size, *ends_record = json.loads(raw)  # see _entry
                yield PageKey(url, etag, page_size, index, *ends_record), size

    def replace_all(self, entries: Iterable[tuple[PageKey, int]]) -> None:
        """Rebuild: the pages database becomes exactly ``entries`` (counted: ``rebuilds``)."""
        with transaction(self._env, write=True) as txn:
            txn.drop(self._pages, delete=False)
            txn.put(_USED, _INT.pack(0), db=self._meta)
            self._bump(txn, _REBUILDS, 1)
            for key, size in entries:
                value = _entry(key, size)
                if txn.put(key.digest.encode(), value, db=self._pages, overwrite=False):
                    self._bump(txn, _USED, size)

    def used(self) -> int:
        with transaction(self._env, db=self._meta) as txn:
            raw = txn.get(_USED)
        return _INT.unpack(raw)[0] if raw else 0

    def rebuilds(self) -> int:
        """How many times a process found a dead holder and rebuilt the index from the page
        files (every process on the directory counts here; ``datahub cache stats`` shows it)."""
        with transaction(self._env, db=self._meta) as txn:
            raw = txn.get(_REBUILDS)
        return _INT.unpack(raw)[0] if raw else 0

    def count(self) -> int:
        with transaction(self._env, db=self._pages) as txn:
            return txn.stat(self._pages)["entries"]

    # --- pins ------------------------------------------------------------------------------------
    def set_pin(self, name: str, object_ids: Iterable[str]) -> int:
        """Replace pin ``name`` with ``object_ids``; returns how many objects it holds."""
        prefix = name.encode() + b"\0"
        n = 0
        with transaction(self._env, write=True, db=self._pins) as txn:
            self._delete_prefix(txn, prefix)
            for oid in object_ids:
                n += txn.put(prefix + oid.encode(), b"")
            self._bump(txn, _PIN_GEN, 1)
        return n

    def remove_pin(self, name: str) -> bool:
        with transaction(self._env, write=True, db=self._pins) as txn:
            found = self._delete_prefix(txn, name.encode() + b"\0")
            self._bump(txn, _PIN_GEN, 1)
        return found > 0

    def pins(self) -> dict[str, int]:
        """Pin name -> number of objects."""
        out: dict[str, int] = {}
        with transaction(self._env, db=self._pins) as txn:
            for key in txn.cursor().iternext(values=False):
                name = key.split(b"\0", 1)[0].decode()
                out[name] = out.get(name, 0) + 1
        return out

    def pinned_objects(self) -> set[str]:
        with transaction(self._env, db=self._pins) as txn:
            return {key.split(b"\0", 1)[1].decode() for key in txn.cursor().iternext(values=False)}

    def pin_generation(self) -> int:
        with transaction(self._env, db=self._meta) as txn:
            raw = txn.get(_PIN_GEN)
        return _INT.unpack(raw)[0] if raw else 0

    # --- helpers -----------------------------------------------------------------------------------
    def _bump(self, txn, name: bytes, delta: int) -> None:
        raw = txn.get(name, db=self._meta)
        txn.put(name, _INT.pack((_INT.unpack(raw)[0] if raw else 0) + delta), db=self._meta)

    def _delete_prefix(self, txn, prefix: bytes) -> int:
        cursor = txn.cursor(db=self._pins)
        n = 0
        if cursor.set_range(prefix):
            while cursor.key().startswith(prefix):
                n += 1
                if not cursor.delete():
                    break
        return n


def _entry(key: PageKey, size: int) -> bytes:
    """A page's index value: ``[url, etag, page_size, index, size]``, and ``true`` after it
    for a page that ends its record (``PageKey.ends_record``) only. Why only then: a process
    of an older version sharing the directory reads five fields and fails on a sixth; it
    meets one only for such pages, never for the rest of the cache."""
    fields: list = [key.url, key.etag, key.page_size, key.index, size]
    return json.dumps([*fields, True] if key.ends_record else fields).encode()
