"""The object-store contract every backend implements (s3, local directory, memory, rados).

The interface is deliberately small: five hooks. Everything else (copying, readers,
multipart decisions, retries) is built on top of them once, in this package, so the
contract test suite in ``tests/storage`` proves each backend by exercising only these.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from datahub.storage.etags import Md5Etags
from datahub.storage.urls import encode_key


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a listing or stat says of one object. ``key`` is relative to the store's root."""

    key: str
    size: int
    etag: str
    mtime: float  # seconds since the epoch, UTC


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Names immutable bytes: an object location plus the etag it had when recorded.

    ``url`` is absolute (``s3://bucket/key``, ``file:///abs/path``, ``memory://name/key``);
    the catalog stores it in records and the cache keys pages by (url, etag, page index).
    """

    url: str
    etag: str
    size: int


class ObjectStore(abc.ABC):
    """An S3-like flat key space under a root URL.

    Implementations translate their own errors into ``datahub.errors`` exactly once:
    ObjectNotFound, AccessDenied (both naming bucket and key), ObjectChanged (etag
    precondition failed), TransientStorageError (retry-worthy) and StorageError.
    """

    #: absolute root URL, e.g. ``s3://bucket/prefix``, ``file:///var/objects``, ``memory://x``
    root_url: str

    @abc.abstractmethod
    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        """Stream objects whose key starts with ``prefix``, in key order, after ``start_after``."""

    def list_dir(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo | str]:
        """One level below ``prefix`` (which ends with ``/`` or is empty), in key order after
        ``start_after``: objects, and each subdirectory once as its key prefix (``"a/b/"``).

        Why: a mount of a large bucket lists only the directories readers reach. This
        fallback reads every key below and rolls them up; a store with a delimiter (S3)
        sends one request per page of the level instead.
        """
        last = ""
        for info in self.list(prefix, start_after):
            cut = info.key.find("/", len(prefix))
            if cut < 0:
                yield info
            elif info.key[: cut + 1] != last:
                last = info.key[: cut + 1]
                yield last

    @abc.abstractmethod
    def stat(self, key: str) -> ObjectInfo:
        """Size, etag and mtime of one object; ObjectNotFound if absent."""

    @abc.abstractmethod
    def read(self, key: str, start: int = 0, end: int | None = None, etag: str | None = None) -> bytes:
        """Bytes ``[start, end)`` of an object (``end=None``: to the end).

        With ``etag`` the read is conditional (If-Match): if the object now has another
        etag, raise ObjectChanged instead of returning bytes of a different object.
        """

    @abc.abstractmethod
    def put(self, key: str, data: bytes | BinaryIO, size: int | None = None) -> ObjectInfo:
        """Store an object atomically (readers see the old or the new object, never a mix).

        File-like ``data`` is streamed; S3 uses multipart above the configured threshold.
        Returns the new object's info (with its etag).
        """

    def put_once(self, key: str, data: bytes | BinaryIO, size: int | None = None) -> ObjectInfo:
        """Store bytes under a name that only ever holds them (a content-addressed blob): an
        object already at ``key`` is kept, and the info returned is the stored object's.

        Why: a record keeps the etag it was given, and a second put of the same name by a
        concurrent commit or import gave the object a new etag on every store whose etag
        names the write (a local file's inode and ctime, a RADOS version), so the first
        record could never be read again (pinblobs16). ``put_once_created`` says, besides,
        whether this call stored the bytes.
        """
        return self.put_once_created(key, data, size)[0]

    def put_once_created(
        self, key: str, data: bytes | BinaryIO, size: int | None = None
    ) -> tuple[ObjectInfo, bool]:
        """``put_once``, and whether the object now at ``key`` is this call's write (False: an
        object already there was kept, whose bytes may be anyone's).

        Why: a blob's writer must check a kept object against its name
        (``datahub.storage.blobs``), but not read back what it has just written. This default
        puts and then stats (the etag the store has after both writers, not the one this put
        made); exact where equal bytes get equal etags (S3's md5, memory), and the write counts
        as this call's only if the etags agree. A store that can create exclusively overrides
        it (local: rename without replacing; S3: ``If-None-Match``; RADOS: an exclusive create).
        """
        put = self.put(key, data, size)
        now = self.stat(key)
        return now, now.etag == put.etag

    def etag_hasher(self, size: int) -> Md5Etags | None:
        """What computes, from the bytes of a ``size``-byte object fed to it in order, the etag
        this store gives them when its own ``put`` stores them; None where the etag names the
        write, not the bytes (local files, RADOS versions). Why: a writer that hashes the
        bytes anyway proves a stored blob's content by its stat (``datahub.storage.etags``)."""
        return None

    def identity(self) -> str:
        """What tells this store's objects from another store's of the same URL in this
        process ("": it cannot be told now). Why: a blob's proof (``datahub.storage.blobs``)
        is remembered per (identity, url, etag), and an etag that names a write, not the
        bytes (a RADOS object version), is found again on another cluster with a pool of the
        same name, whose blob under it holds other bytes. The default, the root URL, fits a
        store whose URL names it whole (memory: one key space per name)."""
        return self.root_url

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove an object; deleting an absent key is not an error (idempotent)."""

    def read_chunks(
        self,
        key: str,
        start: int = 0,
        end: int | None = None,
        etag: str | None = None,
        chunk_size: int = 1 << 20,
    ) -> Iterator[bytes]:
        """Bytes ``[start, end)`` as a stream of chunks, from one request where the backend can.

        A sequential reader of a large object should pay one request, not one per page: S3
        servers charge per request (moto reads the whole object for every range). The
        conditions are those of ``read``: with ``etag``, ObjectChanged instead of bytes of
        another object. Closing the generator early releases the connection. The default
        reads the range in one piece; backends that can stream override it. No chunk is
        empty: an empty range yields nothing.
        """
        data = self.read(key, start, end, etag)
        if data:
            yield data

    # --- derived, shared by every backend -----------------------------------------------------
    def url_for(self, key: str) -> str:
        """Absolute URL of ``key`` in this store (what records and cache keys hold).

        The key is escaped by ``datahub.storage.urls.encode_key`` so that any legal key,
        ``?``, ``#`` and ``%`` included, parses back to itself (docs/storage.md).
        """
        return f"{self.root_url.rstrip('/')}/{encode_key(key)}"

    def ref(self, key: str) -> ObjectRef:
        info = self.stat(key)
        return ObjectRef(self.url_for(key), info.etag, info.size)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default has nothing to release."""
