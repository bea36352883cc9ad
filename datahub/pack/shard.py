"""LMDB shard files: the one module that imports lmdb.

One shard = one LMDB file (``subdir=False``). Keys are record keys (UTF-8), values are
samples in the ``datahub.pack.layout`` format. A reserved key that no record key can be
(it starts with NUL, which ``check_key`` refuses) holds the shard's own index: format,
count, first and last key. The writer fills a scratch environment and finishes with a
compacting copy, so the published file has no free pages and no lock file, and a shard
is either complete or absent (the copy is renamed into place).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb

from datahub.errors import InvalidInput, StorageError
from datahub.lmdb_fork import close_inherited, transaction, using
from datahub.procs import keep_inherited

INDEX_KEY = b"\x00datahub-shard-index"
SHARD_FORMAT = "datahub.pack.shard/1"
_MAP_SIZE = 1 << 40  # address space only: LMDB files grow as written on Linux
_TXN_BYTES = 32 * 1024**2  # commit the scratch environment every 32 MiB


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

    Keyed by (pid, path): after a fork the child closes its inherited copy and opens its
    own handle instead of using the parent's. Reference-counted so the last reader to close releases the file.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._envs: dict[tuple[int, str], list[Any]] = {}  # -> [env, refcount]

    def acquire(self, path: Path) -> Any:
        key = (os.getpid(), str(path))
        with self._lock:  # opening maps the file: no data I/O happens under the lock
            entry = self._envs.get(key)
            if entry is None:
                for stale in [k for k in self._envs if k[1] == key[1]]:
                    # inherited through fork: close the child's copy of the mapping (lmdb
                    # refuses a second handle to a file it believes this process has open),
                    # unless a parent thread was reading it at the fork (datahub.lmdb_fork)
                    if not close_inherited(self._envs.pop(stale)[0]):
                        raise StorageError(
                            f"cannot open shard {path} in this forked process: a thread of its "
                            "parent was reading it at the fork, so the parent's handle stays open "
                            "here; use the DataLoader start method 'spawn', or read no sample in "
                            "the parent while workers start"
                        )
                try:
                    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False,
                                    readahead=False, max_readers=2048)  # fmt: skip
                except lmdb.Error as exc:
                    raise StorageError(f"cannot open shard {path}: {exc}") from exc
                entry = self._envs[key] = [env, 0]
            entry[1] += 1
            return entry[0]

    def release(self, path: Path) -> None:
        key = (os.getpid(), str(path))
        with self._lock:
            entry = self._envs.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del self._envs[key]
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
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._env: Any = None
        self._pid = 0

    def _open(self) -> Any:
        if self._env is None or self._pid != os.getpid():
            self._env = _ENVIRONMENTS.acquire(self.path)
            self._pid = os.getpid()
        return self._env

    def get(self, key: str) -> bytes:
        with transaction(self._open(), buffers=False) as txn:
            value = txn.get(key.encode())
        if value is None:
            raise InvalidInput(f"shard {self.path.name} has no sample {key!r}", key=key)
        return value

    def index(self) -> dict[str, Any]:
        with transaction(self._open()) as txn:
            raw = txn.get(INDEX_KEY)
        if raw is None:
            raise InvalidInput(f"{self.path} is not a datahub shard (no index)")
        return json.loads(raw)

    def iter_keys(self) -> Iterator[str]:
        """The shard's keys in order, read in one transaction before the first is yielded: a
        transaction left open across yields would hold back every fork of this process until
        the caller finished the shard (``datahub.lmdb_fork``)."""
        with transaction(self._open()) as txn:
            keys = [raw for raw in txn.cursor().iternext(keys=True, values=False) if raw != INDEX_KEY]
        for raw in keys:
            yield raw.decode()

    def close(self) -> None:
        if self._env is not None and self._pid == os.getpid():
            _ENVIRONMENTS.release(self.path)
        self._env = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}  # environments never travel to another process

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])
