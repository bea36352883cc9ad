"""Helpers derived from the five hooks, shared by import ``--copy``, write-back and packing.

They live here once so every backend gets them for free and none reimplements them.
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO

from datahub.storage.base import ObjectInfo, ObjectStore

DEFAULT_READ_CHUNK = 8 * 1024 * 1024


class _RangeReader(io.RawIOBase):
    """A read-only file over ranged, etag-checked reads of one object version."""

    def __init__(self, store: ObjectStore, key: str, etag: str, size: int, chunk: int) -> None:
        self._store, self._key, self._etag, self._size = store, key, etag, size
        self._chunk = chunk
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:
        want = min(len(buffer), self._chunk, self._size - self._pos)
        if want <= 0:
            return 0
        data = self._store.read(self._key, self._pos, self._pos + want, etag=self._etag)
        n = len(data)
        buffer[:n] = data
        self._pos += n
        return n


def open_reader(
    store: ObjectStore, key: str, *, info: ObjectInfo | None = None, chunk: int = DEFAULT_READ_CHUNK
) -> BinaryIO:
    """A buffered binary file reading ``key`` in ``chunk``-sized ranges.

    Every range is read under the etag of ``info`` (or of a stat made now), so the reader
    yields the bytes of exactly one object version or raises ObjectChanged, never a mix.
    """
    info = info or store.stat(key)
    raw = _RangeReader(store, key, info.etag, info.size, chunk)
    return io.BufferedReader(raw, buffer_size=chunk)  # type: ignore[return-value]


def copy_object(
    src: ObjectStore,
    src_key: str,
    dst: ObjectStore,
    dst_key: str,
    *,
    info: ObjectInfo | None = None,
    chunk: int = DEFAULT_READ_CHUNK,
) -> ObjectInfo:
    """Stream one object version between any two stores (multipart on S3 when large).

    Memory held: about two chunks, whatever the object size.
    """
    info = info or src.stat(src_key)
    with open_reader(src, src_key, info=info, chunk=chunk) as reader:
        return dst.put(dst_key, reader, size=info.size)


def put_file(store: ObjectStore, key: str, path: str | os.PathLike[str]) -> ObjectInfo:
    """Upload a local file, streamed (multipart on S3 above the threshold)."""
    with open(path, "rb") as fh:
        return store.put(key, fh, size=os.fstat(fh.fileno()).st_size)
