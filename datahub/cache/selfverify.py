"""Content-addressed blobs verify themselves: a record that met another etag may still read.

A record of a committed version names its bytes by (URL, etag). The cache reads under
If-Match, so an object replaced behind a record raises ObjectChanged (promise 1). For a
content-addressed blob (``<objects>/blobs/sha256/ab/cd/<sha256>``: ``--copy`` imports and
workspace commits, ``datahub.ingest.blobs.blob_key``) that is too strict: a blob is only ever
replaced by its own bytes (the short-blob fix of review17a, an RGW multipart race, a put of a
commit before pinblobs16), yet every record that took the old etag was unreadable for good,
and an unchanged file keeps its head record at every later commit (blobs17).

The name of such a blob is the sha256 of its bytes, so when a read under the record's etag
fails, the blob is read whole under its current etag and hashed: if the bytes hash to the
name, the record is served from that etag (the bytes are exactly the content the record
names; a record's size is still checked by every range read, ``origin.read_range``). The
answer is remembered per (URL, record etag) in this process, and the hash's verdict per (URL,
current etag), so the whole-object read is paid once per (URL, new etag), never per page nor
per record: any writer may record a platform blob under an etag it never had (the hash is the
capability, docs/api.md "Record URLs"), and each such etag read the whole blob again, a record
claiming ten bytes of a multi-GB blob the whole blob before its length check (review18b). A
blob that does not hash to its name is remembered too (then a read costs one stat, to see
whether it changed again) and the ObjectChanged stands. Nothing of this runs while the etag
matches: ``current`` is one lookup in an empty dict.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator

from datahub.errors import ObjectChanged
from datahub.storage.base import ObjectStore

log = logging.getLogger(__name__)

#: the layout of ``datahub.ingest.blobs.blob_key`` at the end of a URL (tests tie the two)
_BLOB_URL = re.compile(r"/blobs/sha256/([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f]{64})$")
REMEMBERED = 4096  # (url, record etag) answers kept; the oldest go first
VERIFY_CHUNK = 1 << 20


def digest_named_by(url: str) -> str | None:
    """The sha256 a content-addressed blob URL names, or None for any other URL."""
    m = _BLOB_URL.search(url)
    if m is None or not m.group(3).startswith(m.group(1) + m.group(2)):
        return None
    return m.group(3)


class _Memory:
    """(store identity, url, record etag) -> (current etag, whether its bytes hash to the URL's
    digest)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: OrderedDict[tuple[str, str, str], tuple[str, bool]] = OrderedDict()
        # (store identity, url, current etag) -> whether its bytes hash to the URL's digest,
        # whichever record asked
        self._hashed: OrderedDict[tuple[str, str, str], bool] = OrderedDict()
        self._busy = [threading.Lock() for _ in range(64)]  # striped: one verify of a blob at a time

    def current(self, store: ObjectStore, url: str, etag: str) -> str:
        """The etag to read a record of ``(url, etag)`` under: its own, or a verified one."""
        if not self._answers:  # the normal path: nothing was ever substituted
            return etag
        where = store.identity()
        with self._lock:
            answer = self._answers.get((where, url, etag))
        return answer[0] if answer is not None and answer[1] else etag

    def verified(self, store: ObjectStore, key: str, url: str, etag: str, changed: ObjectChanged) -> str:
        """The etag under which the blob at ``url`` holds the bytes its name says, for a record
        of ``etag`` whose read raised ``changed``; re-raises ``changed`` if there is none (not a
        blob URL, or bytes that do not hash to its name). ObjectNotFound if the blob is gone."""
        digest = digest_named_by(url)
        if digest is None:
            raise changed
        where = store.identity()
        busy = self._busy[hash(url) % len(self._busy)]
        with busy:  # one whole-object read at a time per blob, however many pages and records ask
            now = store.stat(key).etag
            with self._lock:
                known = self._answers.get((where, url, etag))
                hashed = self._hashed.get((where, url, now))
            if known is not None and known[0] == now:
                if known[1]:
                    return now
                raise changed
            if now == etag:  # the record's own etag again: its bytes, whatever they hash to
                ok = True
            elif hashed is not None:
                ok = hashed
            else:
                ok = _hashes_to(store, key, now, digest)
                if ok is None:  # replaced while it was read: nothing is known of ``now``'s bytes
                    raise changed
                hashed = ok
            with self._lock:
                if hashed is not None and where:  # a hash's verdict only, on a store told apart
                    _remember(self._hashed, (where, url, now), hashed)
                if where:
                    _remember(self._answers, (where, url, etag), (now, ok))
        if not ok:
            log.warning(
                "blob %s (etag %s) does not hash to its name: records of etag %s stay unreadable",
                url,
                now,
                etag,
            )
            raise changed
        log.info(
            "blob %s was replaced by its own bytes (etag %s): records of etag %s read from it", url, now, etag
        )
        return now


def _remember(answers: OrderedDict, key: tuple[str, str, str], answer: object) -> None:
    """Keep ``answer`` as the newest of ``answers``; the oldest go beyond ``REMEMBERED``."""
    answers[key] = answer
    answers.move_to_end(key)
    while len(answers) > REMEMBERED:
        answers.popitem(last=False)


def _hashes_to(store: ObjectStore, key: str, etag: str, digest: str) -> bool | None:
    """Whether the blob's bytes under ``etag`` hash to ``digest``; None if the blob was
    replaced while it was read. That says nothing of ``etag``'s bytes, and must not be
    remembered as a mismatch: an S3 single-part put's etag is its bytes' MD5, so the blob's
    own bytes put again return under the same etag (review17e)."""
    check = hashlib.sha256()
    try:
        for piece in store.read_chunks(key, etag=etag, chunk_size=VERIFY_CHUNK):
            check.update(piece)
    except ObjectChanged:  # replaced again meanwhile: the next read asks afresh
        return None
    return check.hexdigest() == digest


MEMORY = _Memory()  # per process: a fetch worker verifies for itself


def own_blob(stores, url: str) -> bool:  # stores: StoreRegistry
    """Whether ``url`` is a blob of this deployment's objects store (``<objects_url>/blobs/
    sha256/…``, where ``--copy`` imports and workspace commits put them): the only blobs
    datahub writes, each only ever with its own bytes. A key anywhere else that merely looks
    content-addressed (a user's ``x/blobs/sha256/ab/cd/<digest>``, imported by reference) may
    have held other bytes under the record's etag, and substituting for it served pages
    cached from those bytes followed by the new ones (review17e). Asked only after a refusal."""
    digest = digest_named_by(url)
    config = getattr(stores, "config", None)
    if digest is None or config is None:
        return False
    objects = stores.store(config.resolved_objects_url)
    return objects.url_for(f"blobs/sha256/{digest[:2]}/{digest[2:4]}/{digest}") == url


def read(stores, store: ObjectStore, key: str, url: str, etag: str, start: int, stop: int) -> bytes:
    """``store.read`` of a record of ``(url, etag)``, under a verified etag if it was replaced
    (a blob of the objects store only: ``own_blob``)."""
    try:
        return store.read(key, start, stop, etag=MEMORY.current(store, url, etag))
    except ObjectChanged as exc:
        if not own_blob(stores, url):
            raise
        return store.read(key, start, stop, etag=MEMORY.verified(store, key, url, etag, exc))


def read_chunks(
    stores, store: ObjectStore, key: str, url: str, etag: str, start: int, stop: int, chunk_size: int
) -> Iterator[bytes]:
    """``store.read_chunks`` of a record of ``(url, etag)``, like ``read``: a stream refused
    before its first chunk starts again under the verified etag. Close it to end the request."""
    got = False
    try:
        for chunk in _closing(
            store.read_chunks(key, start, stop, etag=MEMORY.current(store, url, etag), chunk_size=chunk_size)
        ):
            got = True
            yield chunk
        return
    except ObjectChanged as exc:
        if got or not own_blob(stores, url):
            raise
        changed = exc
    now = MEMORY.verified(store, key, url, etag, changed)
    yield from _closing(store.read_chunks(key, start, stop, etag=now, chunk_size=chunk_size))


def _closing(chunks: Iterator[bytes]) -> Iterator[bytes]:
    try:
        yield from chunks
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
