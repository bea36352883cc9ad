"""LMDB shard files: the one module that imports lmdb.

One shard = one LMDB file (``subdir=False``). Keys are record keys (UTF-8), values are
samples in the ``datahub.pack.layout`` format. A reserved key that no record key can be
(it starts with NUL, which ``check_key`` refuses) holds the shard's own index: format,
count, first and last key. The writer fills a scratch environment and finishes with a
compacting copy, so the published file has no free pages and no lock file, and a shard
is either complete or absent (the copy is renamed into place).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from datahub.cache.pagefile import settled_stat
from datahub.errors import InvalidInput, ObjectChanged, StorageError
from datahub.lmdb_fork import close_inherited, transaction, using
from datahub.procs import keep_inherited

INDEX_KEY = b"\x00datahub-shard-index"
SHARD_FORMAT = "datahub.pack.shard/1"
_MAP_SIZE = 1 << 40  # address space only: LMDB files grow as written on Linux
_TXN_BYTES = 32 * 1024**2  # commit the scratch environment every 32 MiB
READ_TRIES = 3  # reads of a copy that changed while read before ObjectChanged (ShardReader._read)
_T = TypeVar("_T")


class ShardWriter:
    """Append samples in key order; ``finish()`` publishes the compact shard at ``path``.

    Its write transaction stays open between ``put`` calls; each call that writes (a put,
    a commit every ``_TXN_BYTES``, the compacting copy) is a section of the fork gate
    (``datahub.lmdb_fork.using``), so a fork never copies a commit half done (py-lmdb lets
    other threads run, and fork, while it commits). The writer is its opener's: in a forked
    child ``put`` and ``finish`` are refused and ``abort`` leaves the parent's files alone.
    Why: a child writing through the parent's writer wrote its pages into the parent's
    scratch file, published its own shard at the parent's path and deleted the scratch file
    (tests/pack/test_fork27.py)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._pid = os.getpid()  # the opener: the only process that may write it
        self._scratch = self.path.with_name(self.path.name + ".scratch")
        self._scratch.unlink(missing_ok=True)
        try:
            self._env = lmdb.open(str(self._scratch), subdir=False, map_size=_MAP_SIZE, lock=False,
                                  sync=False, metasync=False, readahead=False)  # fmt: skip
        except lmdb.Error as exc:
            raise StorageError(f"cannot create shard {self.path}: {exc}") from exc
        self._txn = self._env.begin(write=True)
        self._pending = 0
        self.count = 0
        self.first = self.last = ""

    def _opener(self, what: str) -> None:
        """Refuse ``what`` in a process other than the opener (a forked child)."""
        if self._pid != os.getpid():
            keep_inherited(self._env, self._txn)  # the parent's: never closed here
            raise InvalidInput(
                f"cannot {what} shard {self.path}: its writer was opened in process {self._pid}, and "
                f"this is {os.getpid()} (a forked child); write a shard of the child's own with a "
                "new ShardWriter at another path"
            )

    def put(self, key: str, value: bytes) -> None:
        self._opener(f"put {key!r} into")
        if self.last and key <= self.last:
            raise InvalidInput(f"shard {self.path.name}: key {key!r} is not after {self.last!r}", key=key)
        with using(self._env):
            self._txn.put(key.encode(), value)
            self.count += 1
            self.first = self.first or key
            self.last = key
            self._pending += len(value)
            if self._pending >= _TXN_BYTES:
                self._txn.commit()
                self._txn = self._env.begin(write=True)
                self._pending = 0

    def finish(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write the shard index, compact into ``path`` atomically; returns the index."""
        self._opener("finish")
        index = {"format": SHARD_FORMAT, "count": self.count, "first": self.first, "last": self.last,
                 **(extra or {})}  # fmt: skip
        try:
            with using(self._env):
                self._txn.put(INDEX_KEY, json.dumps(index, sort_keys=True).encode())
                self._txn.commit()
                tmp = self.path.with_name(self.path.name + ".tmp")
                tmp.unlink(missing_ok=True)
                self._env.copy(str(tmp), compact=True)
            os.replace(tmp, self.path)
        except lmdb.Error as exc:
            raise StorageError(f"cannot finish shard {self.path}: {exc}") from exc
        finally:
            self.abort()
        return index

    def abort(self) -> None:
        """Drop the scratch environment (after finish, or when the task fails); in a forked
        child, nothing (the files and the environment are the parent's)."""
        if self._pid != os.getpid():
            keep_inherited(self._env, self._txn)
            return
        try:
            with using(self._env):
                self._env.close()
        finally:
            self._scratch.unlink(missing_ok=True)
            Path(str(self._scratch) + "-lock").unlink(missing_ok=True)


class _OpenEnvironments:
    """LMDB allows one handle per file per process, so readers of one file share it.

    Keyed by (pid, st_dev, st_ino) of the file the handle maps, not by its path. Why: keyed
    by path, a reader opened after the copy at that path was replaced (``PackedDataset.open``
    downloaded it again and renamed it over the old one) got the handle an earlier reader had
    opened on the OLD file, and read its bytes (packed43). The file is opened first and the
    handle made through that descriptor (``/proc/self/fd/N``), so what ``accept`` checked is
    exactly what LMDB maps; the descriptor is kept, so a reader can ask whether that file is
    still as it was verified (``descriptor``). After a fork the child closes its inherited copy
    of a file's handle and opens its own instead of using the parent's. Reference-counted so
    the last reader to close releases the file.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._envs: dict[tuple[int, int, int], list[Any]] = {}  # -> [env, refcount, fd]

    def acquire(self, path: Path, accept: Callable[[int, os.stat_result], None]) -> tuple[Any, Any]:
        """(key, env) of the file at ``path`` once ``accept(fd, its fstat)`` returned (it
        raises for a file the reader must not read)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise StorageError(f"cannot open shard {path}: {exc}") from exc
        try:
            st = os.fstat(fd)
            accept(fd, st)
            key = (os.getpid(), st.st_dev, st.st_ino)
            with self._lock:  # opening maps the file: no data I/O happens under the lock
                entry = self._envs.get(key)
                if entry is None:
                    for stale in [k for k in self._envs if k[1:] == key[1:]]:
                        # inherited through fork: close the child's copy of the mapping (lmdb
                        # refuses a second handle to a file it believes this process has open),
                        # unless a parent thread was reading it at the fork (datahub.lmdb_fork)
                        inherited = self._envs.pop(stale)
                        os.close(inherited[2])  # the child's copy of the descriptor
                        if not close_inherited(inherited[0]):
                            raise StorageError(
                                f"cannot open shard {path} in this forked process: a thread of its "
                                "parent was reading it at the fork, so the parent's handle stays open "
                                "here; use the DataLoader start method 'spawn', or read no sample in "
                                "the parent while workers start"
                            )
                    try:
                        env = lmdb.open(f"/proc/self/fd/{fd}", subdir=False, readonly=True, lock=False,
                                        readahead=False, max_readers=2048)  # fmt: skip
                    except lmdb.Error as exc:
                        raise StorageError(f"cannot open shard {path}: {exc}") from exc
                    entry = self._envs[key] = [env, 0, fd]
                    fd = -1  # the entry's now (``descriptor``), closed with the handle
                entry[1] += 1
                return key, entry[0]
        finally:
            if fd >= 0:
                os.close(fd)

    def descriptor(self, key: tuple[int, int, int]) -> int:
        """A descriptor of the file the handle ``key`` maps (held by a reader: open)."""
        return self._envs[key][2]

    def release(self, key: tuple[int, int, int]) -> None:
        with self._lock:
            entry = self._envs.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del self._envs[key]
                os.close(entry[2])
                with using(entry[0]):
                    entry[0].close()

    def after_fork_in_child(self) -> None:
        """A fresh lock in a forked child (a DataLoader worker): a parent thread opening a
        shard at the fork held it, and the child's first ``acquire`` waited forever. The
        inherited handles stay listed; ``acquire`` closes them when the child opens the file."""
        self._lock = threading.Lock()


_ENVIRONMENTS = _OpenEnvironments()
os.register_at_fork(after_in_child=_ENVIRONMENTS.after_fork_in_child)


class ShardReader:
    """Read-only access to one local shard file; opens the environment on first use.

    Opening lazily matters for DataLoader workers: each forked worker must open its own
    environment (an LMDB handle must not cross a fork), so a reader made in the parent
    and copied into workers opens once per process.

    A reader given ``identity`` (the st_dev, st_ino, st_size, st_mtime_ns and st_ctime_ns of
    the copy its opener verified) and ``sha256`` (the shard's digest) is bound to those bytes:
    a process that opens it later (a DataLoader worker, forked or spawned) and finds another
    file at ``path`` (the copy was replaced, removed or changed since) hashes that file and
    reads it only if it holds the same bytes; otherwise ObjectChanged names the shard
    (``where``) and says to open the dataset again. Why: such a worker read whatever file was
    at the path then, a shard of another version of the pack included, without a word
    (packed43). A process that has the file open keeps reading the file it opened while that
    file stays as it was verified (one ``fstat`` per read): once it changed (rewritten in
    place) the reader goes to the file at ``path`` under the same rule (the copy downloaded
    again, when another open noticed the damage), else ObjectChanged. Why: it served the
    changed bytes through its mapping, after a download of a good copy too (review71).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        identity: tuple[int, ...] | None = None,
        sha256: str = "",
        where: str = "",
    ) -> None:
        self.path = Path(path)
        self.identity = identity
        self.sha256 = sha256
        self.where = where or f"shard {self.path.name}"
        self._env: Any = None
        self._key: Any = None
        self._pid = 0
        #: handles left for a changed file, released at ``close``: another thread may be
        #: reading through one still
        self._retired: list[tuple[int, int, int]] = []
        self._refused: tuple[int, ...] | None = None  # a file _accept hashed and refused
        self._lock, self._lock_pid = threading.Lock(), os.getpid()

    def _open(self) -> tuple[Any, Any, tuple[int, ...] | None]:
        """(handle key, environment, the state its file was verified in) of the copy to read;
        the state is None for a reader bound to no digest (``_as_verified``: not checked)."""
        key, env = self._key, self._env  # the key first: it is replaced before the handle
        verified = self._checked_state()
        if env is not None and self._pid == os.getpid() and self._as_verified(key, verified):
            return key, env, verified
        if self._lock_pid != os.getpid():  # a forked child: a parent thread may have held it
            self._lock, self._lock_pid = threading.Lock(), os.getpid()
        with self._lock:
            if self._env is not None and self._pid == os.getpid():
                if self._as_verified(self._key, self._checked_state()) or self._verified_again():
                    return self._key, self._env, self._checked_state()
                self._retired.append(self._key)  # the mapped copy no longer holds the shard
                self._env = None
            try:
                self._key, self._env = _ENVIRONMENTS.acquire(self.path, self._accept)
            except StorageError as exc:
                if self.identity is None or not isinstance(exc.__cause__, FileNotFoundError):
                    raise
                raise self._changed("was removed after PackedDataset.open verified it") from exc
            self._pid = os.getpid()
            return self._key, self._env, self._checked_state()

    def _checked_state(self) -> tuple[int, ...] | None:
        """The state the copy's file must be in to be read, or None: a reader bound to no
        digest is not checked (it could not tell a changed file from one merely renamed over or
        removed, which moves its ctime too) and keeps what it opened."""
        return self.identity if self.identity is not None and self.sha256 else None

    def _as_verified(self, key: tuple[int, int, int], state: tuple[int, ...] | None) -> bool:
        """Whether the file this process maps (handle ``key``) is in ``state``, the state it
        was verified in (None: not checked)."""
        return state is None or file_identity(os.fstat(_ENVIRONMENTS.descriptor(key))) == state

    def _read(self, read: Callable[[Any], _T]) -> _T:
        """``read(env)`` of the verified copy, the file's state checked again once it is read.

        Why after, too: a write landing between ``_open``'s check and the end of the read
        (another tool rewriting the copy in place) was returned as the sample (review72). A
        write moves the file's ctime before it copies a byte, so a state unchanged after the
        read means no byte read had changed (pyfuse3's READs in C check after their pread for
        the same reason, fastread.h). A copy that changed meanwhile is read again under
        ``_open``'s rule: the copy downloaded again, or ObjectChanged."""
        for _ in range(READ_TRIES):
            key, env, state = self._open()
            value = read(env)
            if self._as_verified(key, state):
                return value
        raise self._changed(f"changed while it was read, {READ_TRIES} times in a row")

    def _verified_again(self) -> bool:
        """Whether the mapped file, changed in state since it was verified, still holds the
        shard's bytes (hashed: a rename over it or its removal moves its ctime as a write does);
        if so it is the verified state from now on."""
        fd = _ENVIRONMENTS.descriptor(self._key)
        before = file_identity(settled_state(fd))  # a write from now on shows, whatever the tick
        if fd_sha256(fd) != self.sha256 or file_identity(os.fstat(fd)) != before:
            return False
        self.identity = before
        return True

    def _accept(self, fd: int, st: os.stat_result) -> None:
        """Raise ObjectChanged unless the open file ``fd`` is the bound copy or holds its bytes."""
        if self.identity is None:
            return
        found = file_identity(st)
        if found == self.identity:
            return
        if found != self._refused and self.sha256:
            settled = file_identity(settled_state(fd))  # a write from now on shows, whatever the tick
            if fd_sha256(fd) == self.sha256 and file_identity(os.fstat(fd)) == settled:
                self.identity = settled  # another copy of the same bytes (downloaded again)
                return
            found = file_identity(os.fstat(fd))
        self._refused = found  # not hashed again at the next read while it stays so
        raise self._changed(
            "is no longer the file PackedDataset.open verified (it was replaced or changed since) "
            "and does not hold the shard's bytes" + (f" (sha256:{self.sha256})" if self.sha256 else "")
        )

    def _changed(self, what: str) -> ObjectChanged:
        """The error of a bound copy this process cannot read: which, what happened, what to do."""
        return ObjectChanged(
            f"{self.where}: the local copy {self.path} {what}; open the dataset again with "
            "PackedDataset.open (it downloads the shard again) and make the DataLoader from the "
            "new object",
            path=str(self.path),
            version=self.where,
        )

    def get(self, key: str) -> bytes:
        value = self._read(functools.partial(_get, raw=key.encode()))
        if value is None:
            raise InvalidInput(f"shard {self.path.name} has no sample {key!r}", key=key)
        return value

    def index(self) -> dict[str, Any]:
        raw = self._read(functools.partial(_get, raw=INDEX_KEY))
        if raw is None:
            raise InvalidInput(f"{self.path} is not a datahub shard (no index)")
        return json.loads(raw)

    def iter_keys(self) -> Iterator[str]:
        """The shard's keys in order, read in one transaction before the first is yielded: a
        transaction left open across yields would hold back every fork of this process until
        the caller finished the shard (``datahub.lmdb_fork``)."""
        for raw in self._read(_keys):
            yield raw.decode()

    def close(self) -> None:
        if self._env is not None and self._pid == os.getpid():
            _ENVIRONMENTS.release(self._key)
        for key in self._retired:
            if key[0] == os.getpid():  # a parent's handles are the parent's
                _ENVIRONMENTS.release(key)
        self._retired.clear()
        self._env = None

    def __getstate__(self) -> dict[str, Any]:
        # environments never travel to another process; the binding does
        return {"path": self.path, "identity": self.identity, "sha256": self.sha256, "where": self.where}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(
            state["path"],
            identity=state.get("identity"),
            sha256=state.get("sha256", ""),
            where=state.get("where", ""),
        )


def _get(env: Any, raw: bytes) -> bytes | None:
    """The value of key ``raw`` (copied out of the mapping), or None."""
    with transaction(env, buffers=False) as txn:
        return txn.get(raw)


def _keys(env: Any) -> list[bytes]:
    """Every sample key, in order (copied out of the mapping, in one transaction)."""
    with transaction(env) as txn:
        return [raw for raw in txn.cursor().iternext(keys=True, values=False) if raw != INDEX_KEY]


def file_identity(st: os.stat_result) -> tuple[int, ...]:
    """What tells one file from another and a changed file from itself: device, inode, size,
    mtime and ctime (any write, rename over or restore changes the inode or the ctime)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def settled_state(fd: int) -> os.stat_result:
    """``fstat`` of an open shard copy, its mtime first set a second in the past when it is
    recent (``datahub.cache.pagefile.settled_stat``), so that any later write shows in the state.

    Why: a write stamps the kernel's current time, one clock tick coarse before kernel 6.13
    (Debian 12 runs 6.1) and on file systems without multigrain timestamps; a same-size write in
    the tick a copy's state was taken in left that state as it was, and the changed copy was
    served as verified (review72). A copy of another user, whose times this process may not
    set, is taken as it is."""
    try:
        return settled_stat(fd)
    except PermissionError:
        return os.fstat(fd)


def fd_sha256(fd: int) -> str:
    """The sha256 of an open file, read in bounded chunks from its start."""
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 16 * 1024**2, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()
