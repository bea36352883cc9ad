"""The etag an md5-etag store (S3, Ceph RGW, memory) gives bytes, computed while a writer reads them.

Why: a content-addressed blob found already stored is trusted only if it holds the
content its name says (review17a: a blob of the right size but other bytes was recorded and
served). Reading the blob back to hash it costs a full read per deduplicated file; where the
store's etag is the md5 of the bytes (a single PUT) or the md5 of the parts' md5s and their
count (a multipart upload of a known part size), the md5 computed beside the writer's own
SHA-256 proves the blob's bytes from its stat alone. A blob whose etag is not one of these
(another writer's part size, SSE-KMS etags, which are no md5) is not thereby wrong: it is read
and hashed instead (``datahub.storage.blobs``).
"""

from __future__ import annotations

import hashlib


class Md5Etags:
    """Feed it the bytes in order (``update``); ``etags()`` is what the store would call them.

    ``part_size``: None for a single PUT (etag: md5 hex of the whole), else the part size of
    a multipart upload (etag: ``<md5 of the concatenated part md5s>-<part count>``).
    """

    __slots__ = ("_md5", "_filled", "_parts", "part_size")

    def __init__(self, part_size: int | None = None) -> None:
        if part_size is not None and part_size < 1:
            raise ValueError(f"part size must be positive, not {part_size}")
        self.part_size = part_size
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._filled = 0  # bytes of the current part
        self._parts: list[bytes] = []

    def update(self, data: bytes | bytearray | memoryview) -> None:
        if self.part_size is None:
            self._md5.update(data)
            return
        view = memoryview(data).cast("B")
        while view:
            piece = view[: self.part_size - self._filled]
            self._md5.update(piece)
            self._filled += len(piece)
            view = view[len(piece) :]
            if self._filled == self.part_size:
                self._parts.append(self._md5.digest())
                self._md5, self._filled = hashlib.md5(usedforsecurity=False), 0

    def etags(self) -> frozenset[str]:
        if self.part_size is None:
            return frozenset({self._md5.hexdigest()})
        parts = self._parts + ([self._md5.digest()] if self._filled else [])
        joined = hashlib.md5(b"".join(parts), usedforsecurity=False).hexdigest()
        return frozenset({f"{joined}-{len(parts)}"})
