"""Immutable chunk objects in the shared tier, and a streaming reader that assembles a file.

A file is a list of fixed-size chunks (the cache page size). Every upload of a chunk gets a
fresh object name (``<prefix>/<file id // 1024>/<file id>.<index>.<token>``, ids in hex), so
an acknowledged chunk is never overwritten in place: a crash mid-upload can only leave an
unreferenced object behind, which the next opener deletes (``orphans``). Files share a
directory per 1,024 ids: a directory per file cost one mkdir per new small file, about a
fifth of its write-back time on a local shared tier. Journals written before this layout
hold ``<prefix>/<file id>/<index>.<token>`` keys; both are valid (``file_id_of``).
"""

from __future__ import annotations

import hashlib
import io
import secrets
from collections.abc import Callable, Iterator

from datahub.errors import DatahubError, NoSpace, StorageError
from datahub.storage.base import ObjectStore
from datahub.storage.local import LocalStore

SHARD = 1024  # file ids per shared-tier directory


def _rewrap(exc: DatahubError, context: str) -> DatahubError:
    """Name the workspace and path in a storage error while keeping its type (NoSpace stays NoSpace)."""
    cls = type(exc) if isinstance(exc, NoSpace | StorageError) else StorageError
    return cls(f"{context}: {exc.message}", **exc.details)


class ChunkStore:
    """The shared tier as seen by one workspace: chunk objects under ``prefix``."""

    def __init__(self, store: ObjectStore, prefix: str, what: str) -> None:
        self.store = store
        self.prefix = prefix.strip("/")
        self.what = what
        # Chunk objects are private, uniquely named and never overwritten, and nothing reads
        # their etag: a local-directory shared tier need not md5 every byte (its most costly
        # CPU pass on the write path). Durability (fsync, rename, dir fsync) is unchanged.
        self._put_options = {"content_etag": False} if isinstance(store, LocalStore) else {}

    def put(self, file_id: int, index: int, data: bytes, path: str) -> str:
        key = f"{self.prefix}/{file_id // SHARD:x}/{file_id:x}.{index}.{secrets.token_hex(8)}"
        try:
            self.store.put(key, data, size=len(data), **self._put_options)
        except DatahubError as exc:
            raise _rewrap(exc, f"cannot store data of {path!r} in the shared tier of {self.what}") from exc
        return key

    def get(self, key: str, length: int, path: str) -> bytes:
        try:
            data = self.store.read(key, 0, length)
        except DatahubError as exc:
            raise _rewrap(exc, f"cannot read data of {path!r} from the shared tier of {self.what}") from exc
        if len(data) != length:
            raise StorageError(
                f"chunk {key} of {path!r} in {self.what} is truncated ({len(data)} of {length} bytes); "
                "the shared tier lost data behind datahub's back"
            )
        return data

    def delete(self, key: str) -> None:
        self.store.delete(key)

    def keys(self) -> Iterator[str]:
        for info in self.store.list(self.prefix + "/"):
            yield info.key


def file_id_of(key: str) -> int:
    """The file a chunk key belongs to (-1 if it is no chunk key), for both key layouts."""
    parts = key.rsplit("/", 2)
    if len(parts) < 3:
        return -1
    name = parts[2].split(".")
    try:
        return int(name[0] if len(name) == 3 else parts[1], 16)  # current layout, or the old one
    except ValueError:
        return -1


class FileStream(io.RawIOBase):
    """A read-only stream of a file assembled chunk by chunk (one chunk in memory at a time).

    ``chunk(index) -> bytes`` returns the stored bytes of one chunk (maybe shorter than the
    chunk size, the rest being zeros); the stream pads and clips to ``size`` and computes the
    sha256 of what it served, so the flusher records a checksum without a second pass.
    """

    def __init__(
        self, size: int, chunk_size: int, chunk: Callable[[int], bytes], on_chunk: Callable[[int], None]
    ) -> None:
        self.size, self.chunk_size, self._chunk, self._on_chunk = size, chunk_size, chunk, on_chunk
        self._index = 0
        self._buf = memoryview(b"")
        self.sha256 = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def _next(self) -> bool:
        start = self._index * self.chunk_size
        if start >= self.size:
            return False
        want = min(self.chunk_size, self.size - start)
        data = self._chunk(self._index)[:want]
        if len(data) < want:
            data = data + bytes(want - len(data))
        self.sha256.update(data)
        self._on_chunk(len(data))
        self._buf = memoryview(data)
        self._index += 1
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        if not self._buf and not self._next():
            return 0
        n = min(len(buffer), len(self._buf))
        buffer[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n
