"""``--copy``: bytes go under the datahub-managed prefix, named by their SHA-256.

Content addressing (``blobs/sha256/ab/cd/abcd…``) makes copies immutable (a name never
gets other bytes) and deduplicated (the same bytes imported twice, or under two keys,
are stored once). The source is read under its etag in bounded chunks, spooled to a
temporary file (RAM up to one chunk) while hashing, then stored the one way every blob is
(``datahub.storage.blobs.store_blob``: put once if absent, a stored one checked against
the content, written again if it is not that content). Where a blob is found stored on S3,
the md5 etag S3 would give the bytes is computed from the spool, so the blob is checked by
its stat (md5 costs twice SHA-256's CPU: not computed beside it for every new blob).
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
from concurrent.futures import Future
from dataclasses import dataclass

from datahub.ingest.items import SourceItem
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectInfo, ObjectStore
from datahub.storage.blobs import BLOB_PREFIX, BlobWriter, Content, StoredBlob, blob_key, store_blob

__all__ = ["BLOB_PREFIX", "CHUNK_BYTES", "Blob", "BlobCopier", "blob_key"]

CHUNK_BYTES = 4 * 1024**2


@dataclass(frozen=True, slots=True)
class Blob:
    url: str
    etag: str
    size: int
    checksum: str  # "sha256:<hex>"


class BlobCopier:
    def __init__(
        self, objects: ObjectStore, stores: StoreRegistry, *, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        self.objects, self.stores, self.chunk_bytes = objects, stores, chunk_bytes
        self.copied_bytes = 0  # bytes actually uploaded (deduplicated blobs are not counted)
        self._lock = threading.Lock()  # copies run on several threads; guards the two fields
        self._running: dict[str, Future[StoredBlob]] = {}

    def copy(self, item: SourceItem) -> Blob:
        store, key = self.stores.for_url(item.url)
        digest = hashlib.sha256()
        with tempfile.SpooledTemporaryFile(max_size=self.chunk_bytes) as spool:
            offset = 0
            while offset < item.size:
                end = min(offset + self.chunk_bytes, item.size)
                data = store.read(key, offset, end, etag=item.etag)
                if not data:
                    break
                digest.update(data)
                spool.write(data)
                offset += len(data)
            hexdigest = digest.hexdigest()
            info = self._store(Content(hexdigest, offset, lambda: self._md5_etags(spool, offset)), spool)
        return Blob(self.objects.url_for(blob_key(hexdigest)), info.etag, info.size, f"sha256:{hexdigest}")

    def _md5_etags(self, spool, size: int) -> frozenset[str]:
        """The etag the objects store would give the spooled bytes, if it gives md5 etags."""
        hasher = self.objects.etag_hasher(size)
        if hasher is None:
            return frozenset()
        spool.seek(0)
        while piece := spool.read(self.chunk_bytes):
            hasher.update(piece)
        return hasher.etags()

    def _store(self, content: Content, spool) -> ObjectInfo:
        """Store the blob (``store_blob``). Concurrent copies of the same bytes merge into one
        (a future per blob; no lock is held during I/O); other processes' puts of it never
        replace a stored blob that holds the content (``ObjectStore.put_once``)."""
        target = blob_key(content.sha256)
        with self._lock:
            running = self._running.get(target)
            mine = running is None
            if mine:
                running = self._running[target] = Future()
        if not mine:
            return running.result().info

        def write(writer: BlobWriter, replace: bool) -> ObjectInfo:
            spool.seek(0)
            return (writer.put if replace else writer.put_once)(target, spool, content.size)

        try:
            stored = store_blob(self.objects, content, write)
            with self._lock:
                self.copied_bytes += stored.written
            running.set_result(stored)
            return stored.info
        except BaseException as exc:
            running.set_exception(exc)
            raise
        finally:
            with self._lock:
                del self._running[target]
