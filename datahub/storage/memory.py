"""An in-process object store: named key spaces shared by everyone in the process.

``memory://name`` always means the same key space within one process (like fsspec's
memory file system), so a test can fill ``memory://x`` through one ``open_store`` call and
a cache can read it through a ``StoreRegistry``. ``drop_memory_space(name)`` forgets one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from datahub.errors import InvalidInput, ObjectChanged, ObjectNotFound
from datahub.procs import PerProcess
from datahub.storage.base import ObjectInfo, ObjectStore
from datahub.storage.etags import Md5Etags
from datahub.storage.keys import check_object_key, check_range, read_all
from datahub.storage.urls import encode_key


@dataclass(frozen=True, slots=True)
class _Blob:
    data: bytes
    info: ObjectInfo


class _Space:
    """One named key space; the lock guards only dictionary access, never I/O."""

    def __init__(self) -> None:
        self._lock = PerProcess(threading.Lock)
        self.blobs: dict[str, _Blob] = {}

    @property
    def lock(self) -> threading.Lock:
        """This process's lock of the space: a forked child gets its own, since a parent
        thread may have held the parent's at the fork (the child then waited for ever)."""
        return self._lock.get()


_SPACES: dict[str, _Space] = {}
_SPACES_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """A fresh lock: a parent thread opening or dropping a space at the fork held it."""
    global _SPACES_LOCK
    _SPACES_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _space(name: str) -> _Space:
    with _SPACES_LOCK:
        return _SPACES.setdefault(name, _Space())


def drop_memory_space(name: str) -> None:
    """Forget every object of ``memory://name`` (tests use this to start clean)."""
    with _SPACES_LOCK:
        _SPACES.pop(name, None)


class MemoryStore(ObjectStore):
    """Thread-safe; etag = md5 hex of the content, as S3 reports for a single-part upload."""

    def __init__(self, name: str, prefix: str = "", clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.root_url = f"memory://{name}" + (
            f"/{encode_key(self.prefix.rstrip('/'))}" if self.prefix else ""
        )
        self._space = _space(name)
        self._clock = clock

    def _get(self, key: str) -> _Blob:
        check_object_key(key)
        with self._space.lock:
            blob = self._space.blobs.get(self.prefix + key)
        if blob is None:
            raise ObjectNotFound(f"object {key!r} not found in {self.root_url}", store=self.root_url, key=key)
        return blob

    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        full, after = self.prefix + prefix, self.prefix + start_after
        with self._space.lock:
            found = [(k, b.info) for k, b in self._space.blobs.items() if k.startswith(full) and k > after]
        cut = len(self.prefix)
        infos = [dataclasses.replace(info, key=k[cut:]) for k, info in found]
        infos.sort(key=lambda i: i.key)
        yield from infos

    def stat(self, key: str) -> ObjectInfo:
        return dataclasses.replace(self._get(key).info, key=key)

    def read(self, key: str, start: int = 0, end: int | None = None, etag: str | None = None) -> bytes:
        check_range(key, start, end)
        blob = self._get(key)
        if etag is not None and blob.info.etag != etag:
            raise ObjectChanged(
                f"object {key!r} in {self.root_url} changed: expected etag {etag}, now {blob.info.etag}",
                store=self.root_url,
                key=key,
                expected=etag,
                actual=blob.info.etag,
            )
        return blob.data[start:end]

    def put(self, key: str, data: bytes | BinaryIO, size: int | None = None) -> ObjectInfo:
        info = self._put(key, data, size, once=False)[0]
        assert info is not None  # an unconditional put always stores
        return info

    def put_once_created(
        self, key: str, data: bytes | BinaryIO, size: int | None = None
    ) -> tuple[ObjectInfo, bool]:
        """Exclusive under the space's lock: an object already there is kept (the base's
        put-then-stat replaced one of other bytes)."""
        info, created = self._put(key, data, size, once=True)
        assert info is not None  # only a conditional replace stores nothing
        return info, created

    def put_replacing(
        self, key: str, data: bytes | BinaryIO, size: int | None, etag: str
    ) -> ObjectInfo | None:
        """Put over the object of ``etag`` only, under the space's lock; None if the name holds
        another object now (or none): ``blobs.store_blob`` looks again (review19a's two
        writers of one wrong blob, as the other stores)."""
        return self._put(key, data, size, once=False, over=etag)[0] or None

    def _put(
        self, key: str, data: bytes | BinaryIO, size: int | None, *, once: bool, over: str | None = None
    ) -> tuple[ObjectInfo | None, bool]:
        check_object_key(key)
        payload = read_all(data, key)
        if size is not None and len(payload) != size:
            raise InvalidInput(
                f"put of object {key!r}: declared size {size} but the data had {len(payload)} bytes", key=key
            )
        info = ObjectInfo(key, len(payload), hashlib.md5(payload).hexdigest(), self._clock())
        with self._space.lock:
            stored = self._space.blobs.get(self.prefix + key) if once or over is not None else None
            if over is not None and (stored is None or stored.info.etag != over):
                return None, False  # another object (or none) is there now
            if over is not None or stored is None:
                self._space.blobs[self.prefix + key] = _Blob(payload, info)
                stored = None
        if stored is not None:
            return dataclasses.replace(stored.info, key=key), False
        return info, True  # the stored info's key is relative to this store; stat/list re-relativize

    def etag_hasher(self, size: int) -> Md5Etags:
        """The md5 of the whole, as ``put`` computes it."""
        return Md5Etags()

    def delete(self, key: str) -> None:
        check_object_key(key)
        with self._space.lock:
            self._space.blobs.pop(self.prefix + key, None)
