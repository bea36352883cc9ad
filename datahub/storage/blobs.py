"""Content-addressed blobs (``blobs/sha256/ab/cd/abcd…``): the one way a blob is stored.

Who: a ``--copy`` import (``datahub.ingest.blobs``) and a workspace commit
(``datahub.workspaces``) both keep bytes under the name of their SHA-256, so a name never
gets other bytes and the same bytes are stored once. Both came here to the same three steps,
which lived twice before (review17a): stat the name; put the bytes once (``put_once``) if
nothing is there; and if what is there is not this content, put the content over it.

What "not this content" means: a blob left there by a torn copy, a hand-made object or any
other writer of the store. Its size alone gave a short one away; one of the right size but
other bytes was recorded and served under the content's checksum (review17a). So a stored
blob is trusted only once proven to hold the content:

- by its etag, where the store's etag is the md5 of the bytes (S3, Ceph RGW, memory): the
  writer has it (a commit: the etag the flush's put of these bytes got) or computes it from
  its own copy of the bytes, only when a stored blob is found (``Content.md5_etags``; md5
  costs twice the CPU of SHA-256, so not beside it for every new blob); no read of the blob;
- else by reading it and hashing it once: local files and RADOS objects (whose etags name the
  write, not the bytes), and an S3 blob another client cut in other parts. A proven
  (store, url, etag) is remembered for the process (``VERIFIED_MAX`` of them, least recently
  used first out), so a blob many files share is read once; any change to the blob changes
  its etag, and records are read under their etag. The store is its ``identity()`` (a RADOS
  cluster's fsid, an S3 endpoint, a local root's device and inode): keyed by URL alone, two
  Ceph clusters with one pool name shared proofs, and a blob proven on one was trusted on
  the other under the same object version with other bytes (guard19).

A blob this call has just created (``put_once_created``) is the writer's own bytes: not read
back. An md5 etag is proof against corruption and other writers' mistakes, not against a
writer able to craft md5 collisions of bytes it also gets committed (docs/storage.md).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import BinaryIO

from datahub.errors import ObjectChanged, ObjectNotFound
from datahub.storage.base import ObjectInfo, ObjectStore

log = logging.getLogger(__name__)

BLOB_PREFIX = "blobs/sha256"
VERIFIED_MAX = 65_536  # (store, url, etag) proven to hold their digest's bytes: about 9 MB when full
READ_CHUNK = 4 * 1024**2
ATTEMPTS = 3  # a blob that changes while it is checked is looked at again, this many times in all


def blob_key(sha256_hex: str) -> str:
    return f"{BLOB_PREFIX}/{sha256_hex[:2]}/{sha256_hex[2:4]}/{sha256_hex}"


def _none() -> Iterable[str]:
    return ()


@dataclass(frozen=True, slots=True)
class Content:
    """What the writer knows of the bytes: their SHA-256 and size, and ``md5_etags()``, the
    etags a store of md5 etags would give them (``ObjectStore.etag_hasher`` over the writer's
    copy, or an md5 etag the same bytes got elsewhere: the workspace object the flusher put).
    Called only for a stored blob of the right size on such a store, not yet proven."""

    sha256: str
    size: int
    md5_etags: Callable[[], Iterable[str]] = _none


@dataclass(frozen=True, slots=True)
class StoredBlob:
    info: ObjectInfo
    written: int  # bytes this call uploaded (0: a stored blob held the content)


class BlobWriter:
    """What a caller's ``write`` puts the bytes through: ``put_once`` (nothing is stored) or
    ``put`` (over a blob that is not the content). It notes whether the object left there is
    this write's, so the helper never reads back bytes it has just written.

    ``put`` replaces only the object ``store_blob`` found wrong (``found``), where the store
    can put on that condition (``put_replacing``: a local store, S3 with ``If-Match``); if
    the name holds another object by then, nothing is put and ``lost`` says so: store_blob
    looks at it again. Why: two writers that found one wrong blob both replaced it, and the
    second's replace took away the etag the first had returned (review19a). A store without
    ``put_replacing`` is put over unconditionally, as before."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self.created = False
        self.found: ObjectInfo | None = None
        self.lost = False

    def put_once(self, key: str, data: bytes | BinaryIO, size: int | None = None) -> ObjectInfo:
        info, self.created = self.objects.put_once_created(key, data, size)
        return info

    def put(self, key: str, data: bytes | BinaryIO, size: int | None = None) -> ObjectInfo:
        put_replacing = getattr(self.objects, "put_replacing", None)
        if self.found is None or put_replacing is None:
            info = self.objects.put(key, data, size)
        else:
            replaced = put_replacing(key, data, size, self.found.etag)
            if replaced is None:  # not the object found wrong any more: nothing was put
                self.lost = True
                return self.found
            info = replaced
        self.created = True
        return info


Write = Callable[[BlobWriter, bool], ObjectInfo]
"""``write(writer, replace)``: put the content's bytes under its blob key with
``writer.put`` (``replace``) or ``writer.put_once``, and return what it returned."""


class _Verified:
    """The bounded set of (store identity, url, etag) proven to hold their name's content,
    each kept as a 16-byte BLAKE2b digest of its parts (about 140 bytes an entry; the strings
    themselves cost about 1 KB). ``None`` (a store that cannot tell its identity now) is never
    in it and never added."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pairs: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(proof: tuple[str, ...]) -> bytes:
        return hashlib.blake2b("\0".join(proof).encode(), digest_size=16).digest()

    def __contains__(self, proof: tuple[str, ...] | None) -> bool:
        if proof is None:
            return False
        key = self._key(proof)
        with self._lock:
            if key not in self._pairs:
                return False
            self._pairs.move_to_end(key)
            return True

    def add(self, proof: tuple[str, ...] | None) -> None:
        if proof is None:
            return
        key = self._key(proof)
        with self._lock:
            self._pairs[key] = None
            self._pairs.move_to_end(key)
            while len(self._pairs) > self.limit:
                self._pairs.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._pairs.clear()


class _Proofs:
    """The remembered proofs of one blob of one store: ``of(etag)`` is its key in ``VERIFIED``.
    The store's identity is asked once, when first needed (a RADOS store's connects; a local
    store's root exists once a blob is there)."""

    def __init__(self, objects: ObjectStore, url: str) -> None:
        self.objects, self.url = objects, url
        self._identity: str | None = None

    def of(self, etag: str) -> tuple[str, str, str] | None:
        if self._identity is None:
            self._identity = self.objects.identity()
        return (self._identity, self.url, etag) if self._identity else None


VERIFIED = _Verified(VERIFIED_MAX)


def store_blob(objects: ObjectStore, content: Content, write: Write) -> StoredBlob:
    """The blob of ``content`` in ``objects``: the stored one if it holds the content, else
    the content written (``write``) once, or over what was there.

    Raises what ``write`` raises (the caller's bytes changed: it retries on fresh state),
    and ObjectChanged if the stored blob changed under every one of ``ATTEMPTS`` checks."""
    key = blob_key(content.sha256)
    url = objects.url_for(key)
    proofs = _Proofs(objects, url)
    writer = BlobWriter(objects)
    for _attempt in range(ATTEMPTS):
        try:
            info = objects.stat(key)
        except ObjectNotFound:
            info = write(writer, False)  # put_once: another import or commit may store it meanwhile
            if writer.created:  # the caller's bytes, checked against the digest by it
                VERIFIED.add(proofs.of(info.etag))
                return StoredBlob(info, content.size)
        try:
            if _holds(objects, key, proofs, info, content):
                return StoredBlob(info, 0)
        except (ObjectChanged, ObjectNotFound):
            continue  # replaced, touched or removed while it was read: look again
        log.warning(
            "blob %s (%d bytes, etag %s) does not hold the %d bytes of sha256 %s: written again with them",
            url,
            info.size,
            info.etag,
            content.size,
            content.sha256,
        )
        writer.found, writer.lost = info, False
        info = write(writer, True)
        if writer.lost:
            continue  # another writer replaced it (or removed it) meanwhile: look again
        VERIFIED.add(proofs.of(info.etag))
        return StoredBlob(info, content.size)
    raise ObjectChanged(
        f"blob {url} kept changing while it was checked against sha256 {content.sha256}; "
        "another writer is replacing it: try again once it stops",
        url=url,
    )


def _holds(objects: ObjectStore, key: str, proofs: _Proofs, info: ObjectInfo, content: Content) -> bool:
    """Whether the stored object ``info`` holds the content: its size, then the remembered
    proofs, then its md5 etag, and last a read of it hashed (ObjectChanged if it changes
    meanwhile)."""
    if info.size != content.size:
        return False
    if proofs.of(info.etag) in VERIFIED:
        return True
    if objects.etag_hasher(content.size) is not None and info.etag in set(content.md5_etags()):
        VERIFIED.add(proofs.of(info.etag))
        return True
    digest = hashlib.sha256()
    for piece in objects.read_chunks(key, etag=info.etag, chunk_size=READ_CHUNK):
        digest.update(piece)
    if digest.hexdigest() != content.sha256:
        return False
    VERIFIED.add(proofs.of(info.etag))
    return True
