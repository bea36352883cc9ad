"""Immutable chunk objects in the shared tier, and a streaming reader that assembles a file.

A file is a list of fixed-size chunks (the cache page size). Every upload of a chunk gets a
fresh object name (``<prefix>/<file id // 1024>/<file id>.<index>.<token>``, ids in hex), so
an acknowledged chunk is never overwritten in place: a crash mid-upload can only leave an
unreferenced object behind, which the next opener deletes (``orphans``). Files share a
directory per 1,024 ids: a directory per file cost one mkdir per new small file, about a
fifth of its write-back time on a local shared tier. Journals written before this layout
hold ``<prefix>/<file id>/<index>.<token>`` keys; both are valid (``file_id_of``).

On a local-directory shared tier a chunk is written straight under its final name
(``O_CREAT|O_EXCL``, write, fsync) instead of ``LocalStore.put``'s temp file, rename and
directory fsync: the name is unique and never rewritten, so there is nothing for a rename
to make atomic, and the directory fsync was a second journal commit of the file system
per chunk (a third of a small file's write-back time). The directory entry of a newly
created file is made durable by the file's own fsync on Linux's journaling file systems
(ext4, xfs, btrfs), the same assumption a plain ``open/write/fsync/close`` makes. What
changes is that a crash mid-write can leave a *torn* chunk under its final name: that is
harmless while no committed record names the chunk (an orphan, deleted by the next
opener), and a record that names a chunk before its write is durable (an *unverified*
record, see ``Workspace``) carries the chunk's length and CRC-32 so recovery can tell a
torn chunk from a whole one (``intact``).

Chunks smaller than 1 MiB on a local shared tier go into *pack files* instead
(``packs.py``): appended to one open file, so a small file's close costs no file create.
Their keys name a byte range of a pack (``<prefix>/packs/<token>/<file id>.<index>.<offset>``);
this class resolves them, so the rest of the write-back code handles every key alike.
``object_of`` maps a key to the object that holds it (itself, or its pack).

Every journal writes under a prefix of its own, ``<workspace prefix>/j-<journal id>``: nodes
that share one shared tier and take a workspace over from each other (the writer lease)
each keep their chunks apart, and a journal's recovery deletes unreferenced objects under its
own prefix only (``reclaimable``). Another node's chunks may still be named by its journal (an
acknowledged file it has not flushed yet): they are not this journal's to judge. Keys written
before journals had ids lie straight under the workspace prefix; they are read as before, and
deleted only through the journal that references them (its garbage), never as orphans.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import logging
import os
import secrets
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:  # a declared dependency (pyproject.toml); without it chunks get CRC-32 fingerprints
    import xxhash
except ImportError:  # pragma: no cover - depends on the environment
    xxhash = None

from datahub.aligned_buffers import AlignedBuffers, ChunkBuffer
from datahub.errors import AccessDenied, DatahubError, NoSpace, ObjectNotFound, StorageError
from datahub.storage.base import ObjectStore
from datahub.storage.local import LocalStore
from datahub.storage.rados import RadosStore
from datahub.storage.s3put import S3Writes
from datahub.writeback.packs import (
    COVER_MAGIC_KEYED,
    PACK_CHUNK_MAX,
    Packs,
    copy_range,
    cover_seed,
    decode_cover,
    encode_cover,
    renumber_cover,
)

log = logging.getLogger(__name__)

SHARD = 1024  # file ids per shared-tier directory
JOURNAL_DIR = "j-"  # a journal's own chunk prefix: ``<workspace prefix>/j-<journal id>`` (never hex)
RECORD_READERS = 8  # RADOS cover records read at once at recovery (one round trip each)
_SLICE = 1 << 20  # write() size: one multi-MiB write into the page cache measured ~10x slower
_ALIGN = 4096  # O_DIRECT's alignment of memory, offset and length (any logical block size up to 4 KiB)
_SPARE = 4  # aligned buffers kept for the next chunk write (bounded: 4 x _DIRECT_SLICE of memory)
_DIRECT_SLICE = 4 << 20  # bytes per O_DIRECT write (one buffer: a chunk of the default page size)


def _rewrap(exc: DatahubError, context: str) -> DatahubError:
    """Name the workspace and path in a storage error while keeping its type (NoSpace stays NoSpace)."""
    cls = type(exc) if isinstance(exc, NoSpace | StorageError) else StorageError
    return cls(f"{context}: {exc.message}", **exc.details)


XXH3_TAG = "x3:"  # a chunk fingerprint written since small41c: "x3:" and xxh3-64 in 16 hex digits


def chunk_fingerprint(data: bytes | bytearray | memoryview) -> int | str:
    """A chunk's fingerprint for the records that name it before it is durable (a cover
    record, a journal record's ``unverified``): ``"x3:<xxh3-64, 16 hex>"``, or without the
    ``xxhash`` package the CRC-32 as an int, the only kind written before small41c. Tagged by
    its type and prefix, so the records of older packs and journals still verify
    (``fingerprint_matches``). Why xxh3 (small41c): the CRC-32 of a 100 KB chunk was the
    largest single step of a small file's close in the daemon's profile (zlib's ``crc32_z``,
    2.5 % of its CPU samples, 20-28 µs a file); xxh3 takes a few µs."""
    if xxhash is None:
        return zlib.crc32(data)
    return f"{XXH3_TAG}{xxhash.xxh3_64_intdigest(data):016x}"


def fingerprint_matches(fingerprint: int | str, data: bytes | bytearray | memoryview, key: str) -> bool:
    """Whether ``data`` (chunk ``key``'s bytes) has ``fingerprint`` (``chunk_fingerprint``).
    A fingerprint of no kind known here (a newer datahub's) is an error, never a verdict: a
    chunk found torn is dropped with its file, which may have been acknowledged."""
    if isinstance(fingerprint, int) and not isinstance(fingerprint, bool):
        return zlib.crc32(data) == fingerprint
    if isinstance(fingerprint, str) and fingerprint.startswith(XXH3_TAG) and xxhash is not None:
        return f"{XXH3_TAG}{xxhash.xxh3_64_intdigest(data):016x}" == fingerprint
    raise StorageError(
        f"chunk {key}: its record's fingerprint {fingerprint!r} is of a kind this datahub cannot "
        "check (written by a newer one, or without the xxhash package installed); install xxhash "
        "or open the workspace with the datahub that wrote it"
    )


def abort_unfinished_uploads(store: ObjectStore, prefix: str, what: str) -> int:
    """Abort every multipart upload left unfinished under ``prefix`` of ``store`` (S3/RGW; other
    stores have none); how many were aborted. The caller's word: it owns ``prefix`` (a
    journal's own chunk prefix or flush folder) and nothing of its own is uploading there now
    (recovery, before the flusher starts; an adoption, the lost holder fenced).

    Why (wbgaps25): a process killed mid-upload (a kill -9 mid-flush: ``S3Writes._put_multipart``'s
    abort never ran) left its parts in the bucket, billed, and nothing aborted them but a
    lifecycle rule, where the bucket has one. Best effort: a store that refuses the listing or
    an abort costs those parts, never the open; the log says which and what to do."""
    if not isinstance(store, S3Writes):
        return 0
    try:
        found = store.unfinished_uploads(prefix)
    except DatahubError as exc:
        log.warning(
            "%s: could not list the multipart uploads left under %s/%s (%s); parts of uploads cut short "
            "by a crash may stay stored there: abort them by hand, or give the bucket a lifecycle rule "
            "(AbortIncompleteMultipartUpload)", what, store.root_url, prefix, exc.message,
        )  # fmt: skip
        return 0
    aborted = 0
    for key, upload in found:
        try:
            store.abort_upload(key, upload)
        except DatahubError as exc:
            log.warning(
                "%s: could not abort the multipart upload %s of %s/%s (%s); its parts stay stored until "
                "it is aborted (by hand, or a lifecycle rule)", what, upload, store.root_url, key, exc.message,
            )  # fmt: skip
            continue
        aborted += 1
        log.warning(
            "%s: aborted the multipart upload %s of %s/%s, left unfinished by a process that died "
            "mid-upload (its parts are deleted; the file is uploaded again whole)",
            what, upload, store.root_url, key,
        )  # fmt: skip
    return aborted


class ChunkStore:
    """The shared tier as seen by one workspace's journal: chunk objects under ``prefix``.

    ``journal``: the journal's id; new chunks go under ``<prefix>/j-<journal>`` (module
    docstring). "" keeps them straight under ``prefix`` (the layout before journal ids).
    """

    #: the journal's secret ``cover_key`` (``packs.COVER_MAGIC_KEYED``): set by the open's
    #: recovery from the journal's meta (an adoption's, from the lost journal's log header);
    #: None writes and reads no keyed record (a journal from before wbgaps25, until then)
    cover_key: bytes | None = None

    def __init__(
        self, store: ObjectStore, prefix: str, what: str, pack_bytes: int = 0, journal: str = ""
    ) -> None:
        self.store = store
        self.workspace_prefix = prefix.strip("/")
        self.journal = journal
        self.prefix = f"{self.workspace_prefix}/{JOURNAL_DIR}{journal}" if journal else self.workspace_prefix
        self.what = what
        # A local directory gets chunks written in place (module docstring); any other store
        # gets a normal put, which is atomic (an object exists whole or not at all).
        self._root: Path | None = store.root if isinstance(store, LocalStore) else None
        # Pack members are recognised whatever ``pack_bytes`` says now: a journal written with
        # packs must read (and keep) its chunks after a restart with packing switched off.
        self._packs = Packs(self._root, self.prefix, pack_bytes) if self._root is not None else None
        # Packs written before journal ids (straight under the workspace prefix): read, adopted
        # and given up member by member as ever, never appended to.
        old_packs = (
            Packs(self._root, self.workspace_prefix, 0) if self._root is not None and journal else None
        )
        self._all_packs = [packs for packs in (self._packs, old_packs) if packs is not None]
        self._pack_new = pack_bytes > 0
        # A RADOS tier stores a chunk's cover record in the chunk object's write op (an xattr),
        # an S3/RGW tier in the chunk's PUT (user metadata, ``S3Writes.put_with_record``).
        self._records: RadosStore | S3Writes | None = (
            store if isinstance(store, RadosStore | S3Writes) and self._root is None else None
        )

    @property
    def local_root(self) -> Path | None:
        """The directory of a local shared tier (None for S3/RGW)."""
        return self._root

    def new_key(self, file_id: int, index: int, length: int, path: str, extra: int = 0) -> str:
        """A fresh, never reused name for one upload of ``length`` bytes of chunk ``index``.

        A small chunk's key reserves its place in a pack (which may create the next pack
        file): write it with ``write`` or give it up with ``delete``; ``extra`` bytes more are
        reserved after it there for a cover record (``carries_cover`` says whether it can have one).
        """
        if self._packs_new(length):
            try:
                return self._packs.reserve(file_id, index, length, extra)
            except OSError as exc:
                context = f"cannot store data of {path!r} in the shared tier of {self.what}"
                raise _os_error(exc, context, f"{self._packs.prefix}/") from exc
        return f"{self.prefix}/{file_id // SHARD:x}/{file_id:x}.{index}.{secrets.token_hex(8)}"

    def put(self, file_id: int, index: int, data: bytes | bytearray | ChunkBuffer, path: str) -> str:
        """Store ``data`` durably under a new key and return the key."""
        key = self.new_key(file_id, index, len(data), path)
        self.write(key, data, path)
        return key

    def _pack_of(self, key: str) -> Packs | None:
        """The packs a member key belongs to; None for a chunk that is an object of its own."""
        return next((packs for packs in self._all_packs if packs.owns(key)), None)

    def reclaimable(self, key: str) -> bool:
        """Whether object ``key`` (from ``objects``) is this journal's to delete when no record
        of it references it: under its own prefix. Objects from before journal ids may be
        another node's acknowledged chunks (nothing tells whose), so only a journal without an
        id (``journal=""``) treats them as its own."""
        if self.prefix != self.workspace_prefix:
            return key.startswith(self.prefix + "/")
        return key.startswith(self.prefix + "/") and not _under_a_journal(self.prefix, key)

    def packed(self, key: str) -> bool:
        """Whether ``key`` is a pack member (a byte range of a pack, not an object of its own)."""
        return self._pack_of(key) is not None

    def carries_cover(self, key: str, length: int = 0, record_bytes: int = 0) -> bool:
        """Whether chunk ``key`` of ``length`` bytes can carry a cover record of
        ``record_bytes``, made durable by the chunk's own write: a pack member (the record
        follows it in the pack), any chunk on RADOS (the record is an xattr set by the
        chunk's write op), a chunk on S3/RGW sent in one PUT whose record fits S3's user
        metadata (``S3Writes.record_fits``: 2 KB, so about 1.4 KB of JSON path: any ASCII path
        the journal keeps, about 116 emoji) on a store that keeps that metadata
        (``S3Writes.keeps_records``: a probe object under this journal's prefix, once per
        store; a leftover one is an unreferenced object, deleted by recovery)."""
        if self.packed(key):
            return True
        if isinstance(self._records, S3Writes):
            return self._records.record_fits(length, record_bytes) and self._records.keeps_records(
                f"{self.prefix}/probe-{secrets.token_hex(8)}"
            )
        return self._records is not None

    def cover_records(self, sizes: dict[str, int]) -> Iterator[tuple[str, dict]]:
        """(chunk key, record) of every cover record in the objects of listing ``sizes``: in
        the packs, or on RADOS and S3/RGW with each chunk object (an xattr, or the metadata a
        HEAD returns: one request per object, 8 at a time; recovery after a crash or a power
        loss and adoption only)."""
        if self._records is not None:
            keys = list(sizes)
            with ThreadPoolExecutor(RECORD_READERS) as pool:
                for key, record in zip(keys, pool.map(self._record_of, keys), strict=True):
                    if record is not None:
                        yield key, record
        for key in sizes:
            packs = next((packs for packs in self._all_packs if packs.is_pack(key)), None)
            if packs is not None:
                yield from packs.cover_records(key, cover_seed(self.journal), self.cover_key)

    def _record_of(self, key: str) -> dict | None:
        """The cover record a RADOS or S3 chunk object carries, if any: ``placed`` and
        ``keyed``, as a pack's record verified where it was written with its journal's key is
        (cover24, wbgaps25). It is the object's own (an xattr, or metadata), read with the
        object it covers: only the object's own write set it, never a user's file bytes."""
        try:
            if self._records is None:
                return None
            record = decode_cover(self._records.record(key), seed=cover_seed(self.journal))
        except ObjectNotFound:  # deleted since the listing
            return None
        if record is not None:
            record["placed"] = record["keyed"] = True
        return record

    def cover_trailer(self, cover: int, record: dict) -> bytes:
        """The bytes of a cover record numbered ``cover`` (``packs.encode_cover``), its CRC
        seeded with this journal's ``packs.cover_seed``: no other journal's recovery takes it.
        Not yet placed: ``renumber_cover`` binds a pack's record to its place. A record that
        will follow a pack member (``record["len"]`` bytes, ``_packs_new``) is keyed when the
        journal has its ``cover_key`` (``packs.COVER_MAGIC_KEYED``): its room holds the MAC."""
        key = self.cover_key if self._packs_new(record["len"]) else None
        return encode_cover(cover, record, cover_seed(self.journal), key=key)

    def _packs_new(self, length: int) -> bool:
        """Whether ``new_key`` puts a chunk of ``length`` bytes in a pack."""
        return self._packs is not None and self._pack_new and length < PACK_CHUNK_MAX

    def renumber_cover(self, trailer: bytes, cover: int, key: str, length: int) -> bytes:
        """The record to write after chunk ``key`` of ``length`` bytes, numbered ``cover``, from
        ``trailer = cover_trailer(0, record)``, without encoding the record again
        (``packs.renumber_cover``). After a pack member it is placed (``DHWBREC3``: its CRC
        seeded with its pack and offset too, ``packs.place_seed``), so a copy of it anywhere
        else in this journal's packs does not verify (cover24); a RADOS or S3 object's record
        stays ``DHWBREC2``: it lies with the object it covers. A keyed ``trailer``
        (``cover_trailer``) gets its MAC here (``DHWBREC4``, wbgaps25)."""
        keyed = self.cover_key if trailer.startswith(COVER_MAGIC_KEYED) else None
        return renumber_cover(trailer, cover, cover_seed(self.journal), self._place(key, length), keyed)

    def _place(self, key: str, length: int) -> tuple[str, int] | None:
        """(pack token, offset) of the cover record after pack member ``key``; None for a chunk
        that is an object of its own. A close's key is a member of this journal's own packs
        (``new_key``), asked first: ``_pack_of``'s generator was half this step's CPU."""
        packs = self._packs
        if packs is None or not packs.owns(key):
            packs = self._pack_of(key)
        return None if packs is None else packs.cover_place(key, length)

    def write(self, key: str, data: bytes | bytearray | ChunkBuffer, path: str, trailer: bytes = b"") -> None:
        """Store ``data`` durably under ``key`` (from ``new_key``): done when this returns.

        A pack member whose write fails is given up (its range is never read). ``trailer``: a
        cover record written after a pack member under the same flush (``packs.py``), or on
        RADOS and S3/RGW with the chunk in one write op or PUT (``carries_cover``). A
        ``ChunkBuffer`` (``datahub.aligned_buffers``) is written from where it lies: with ``O_DIRECT``
        into a chunk file, with one ``pwrite`` into a pack, by an S3/RGW PUT that hashes and
        sends its bytes (perf41f: they were copied into a new ``bytes`` first); RADOS gets a
        copy (its write op takes ``bytes`` only), as any other store.
        """
        context = f"cannot store data of {path!r} in the shared tier of {self.what}"
        if isinstance(data, ChunkBuffer) and self._root is None:
            if isinstance(self.store, S3Writes):
                with data.view() as view:  # ``data`` outlives the view: this frame holds it
                    self._put_object(key, view, trailer, context)
                return
            data = bytes(data)
        packs = self._pack_of(key)
        if packs is not None:
            if isinstance(data, ChunkBuffer):
                with data.view() as view:  # ``data`` outlives the view: this frame holds it
                    self._write_pack(packs, key, view, trailer, context)
            else:
                self._write_pack(packs, key, data, trailer, context)
            return
        if self._root is not None:
            _write_new(self._root / key, data, context, key)
            return
        assert not isinstance(data, ChunkBuffer)
        self._put_object(key, data, trailer, context)

    def _put_object(
        self, key: str, data: bytes | bytearray | memoryview, trailer: bytes, context: str
    ) -> None:
        """Chunk ``key`` as an object of its own (RADOS, S3/RGW), with its cover record if any."""
        try:
            if trailer and self._records is not None:
                self._records.put_with_record(key, data, trailer)
            else:
                self.store.put(key, data, size=len(data))
        except DatahubError as exc:
            raise _rewrap(exc, context) from exc

    def _write_pack(
        self, packs: Packs, key: str, data: bytes | bytearray | memoryview, trailer: bytes, context: str
    ) -> None:
        """``write`` of a pack member; one whose write fails is given up."""
        try:
            packs.write(key, data, trailer)
        except BaseException as exc:
            packs.delete(key)
            if isinstance(exc, OSError):
                raise _os_error(exc, context, key) from exc
            raise

    def copy_in(self, key: str, fd: int, offset: int, length: int, path: str) -> None:
        """``write`` of ``length`` bytes of the local file ``fd`` at ``offset`` (a staged
        file, ``staged.py``), without a copy per byte in Python: on a local shared tier into a
        chunk file, its aligned head read into an aligned buffer and written with ``O_DIRECT``
        (``_copy_new``), the rest, and a pack range, a byte copy in the kernel (``copy_range``:
        ``splice``; never shared extents either way), elsewhere a streamed put (the store reads
        the range in slices as it sends it)."""
        context = f"cannot store data of {path!r} in the shared tier of {self.what}"
        packs = self._pack_of(key)
        if packs is not None:
            try:
                packs.copy_in(key, fd, offset, length)
            except BaseException as exc:
                packs.delete(key)
                if isinstance(exc, OSError):
                    raise _os_error(exc, context, key) from exc
                raise
            return
        if self._root is not None:
            _copy_new(self._root / key, fd, offset, length, context, key)
            return
        try:
            self.store.put(key, RangeReader(fd, offset, length), size=length)
        except DatahubError as exc:
            raise _rewrap(exc, context) from exc

    def fingerprint(self, data: bytes | bytearray | memoryview) -> int | str | None:
        """What recovery needs, besides the length, to trust a chunk whose write may have been
        cut short: a fingerprint where chunks are written in place (``chunk_fingerprint``),
        nothing where writes are atomic."""
        return chunk_fingerprint(data) if self._root is not None else None

    def intact(self, key: str, length: int, fingerprint: int | str | None, sizes: dict[str, int]) -> bool:
        """Whether chunk ``key`` exists whole: right length (``sizes`` is a listing) and
        fingerprint (``fingerprint_matches``: an xxh3 one, or a CRC-32 written before small41c).

        A pack member is whole when its pack reaches past its end and its bytes match the
        fingerprint (a crash can leave a pack short, or zeros where a concurrent append never landed).
        """
        obj, start = self.locate(key)
        whole = sizes.get(obj, -1) >= start + length if obj != key else sizes.get(key) == length
        if not whole:
            return False
        if fingerprint is None:
            return True
        try:
            data = self.store.read(obj, start, start + length)
        except DatahubError:
            return False
        return fingerprint_matches(fingerprint, data, key)

    def locate(self, key: str) -> tuple[str, int]:
        """(object, offset) where the bytes of chunk ``key`` start."""
        packs = self._pack_of(key)
        if packs is not None:
            _path, offset = packs.path_of(key)
            return packs.object_of(key), offset
        return key, 0

    def object_of(self, key: str) -> str:
        """The shared-tier object holding chunk ``key``: itself, or its pack."""
        return self.locate(key)[0]

    def adopt(self, keys: Iterable[str]) -> None:
        """At open: the chunks the journal references (keeps their packs alive)."""
        keys = list(keys)
        for packs in self._all_packs:
            packs.adopt([key for key in keys if packs.owns(key)])

    def close(self) -> None:
        for packs in self._all_packs:
            packs.close()

    def get(self, key: str, length: int, path: str) -> bytes:
        obj, start = self.locate(key)
        try:
            data = self.store.read(obj, start, start + length)
        except DatahubError as exc:
            raise _rewrap(exc, f"cannot read data of {path!r} from the shared tier of {self.what}") from exc
        if len(data) != length:
            raise StorageError(
                f"chunk {key} of {path!r} in {self.what} is truncated ({len(data)} of {length} bytes); "
                "the shared tier lost data behind datahub's back"
            )
        return data

    def delete(self, key: str) -> None:
        """Delete chunk ``key`` (a pack member: give it up; its pack goes with its last one)."""
        packs = self._pack_of(key)
        if packs is not None:
            try:
                packs.delete(key)
            except OSError as exc:
                raise StorageError(f"cannot delete chunk {key} of {self.what}: {exc}", key=key) from exc
            return
        self.store.delete(key)

    def abandon(self, keys: Iterable[str]) -> None:
        """Give up keys from ``new_key`` that were never written and never will be (a commit
        failed before any write began): a pack member's reservation ends (``Packs.abandon``),
        an object key names nothing yet. Never raises: it runs on the way out of the failure
        it follows (a pack left open is closed by the next open's recovery, as before fix21)."""
        for key in keys:
            packs = self._pack_of(key)
            if packs is None:
                continue
            try:
                packs.abandon(key)
            except OSError as exc:
                log.warning("cannot give up unwritten chunk %s of %s: %s", key, self.what, exc)

    def keys(self) -> Iterator[str]:
        for key, _size in self.objects():
            yield key

    def objects(self) -> Iterator[tuple[str, int]]:
        """(key, size) of every chunk object this journal may reference in the shared tier:
        under its own prefix, and from before journal ids; not other journals' chunks."""
        own = self.prefix + "/"
        for info in self.store.list(self.workspace_prefix + "/"):
            if info.key.startswith(own) or not _under_a_journal(self.workspace_prefix, info.key):
                yield info.key, info.size


def _under_a_journal(workspace_prefix: str, key: str) -> bool:
    """Whether ``key`` lies under some journal's own prefix (``<workspace prefix>/j-…/``)."""
    return key[len(workspace_prefix) + 1 :].startswith(JOURNAL_DIR)


def _create_new(target: Path, fill: Callable[[int], None], context: str, key: str) -> None:
    """Create ``target`` (it must not exist), let ``fill(fd)`` write it, fsync it.

    On failure the partial file is removed (best effort: a crash leaves it as an orphan).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        try:
            fd = os.open(target, flags, 0o600)  # owner-only (docs/writeback.md, "Files and their modes")
        except FileNotFoundError:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(target, flags, 0o600)
    except OSError as exc:
        raise _os_error(exc, context, key) from exc
    try:
        fill(fd)
        os.fsync(fd)
    except BaseException as exc:
        os.close(fd)
        try:
            os.unlink(target)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise _os_error(exc, context, key) from exc
        raise
    os.close(fd)


def _write_new(target: Path, data: bytes | bytearray | ChunkBuffer, context: str, key: str) -> None:
    """A new file holding ``data``: its 4 KiB-aligned head with ``O_DIRECT`` where the file
    system takes it (``_write_direct``), the rest (and all of it elsewhere) in 1 MiB slices
    through the page cache. A ``ChunkBuffer``'s head is written from the buffer itself (it is
    aligned, in huge pages: perf41c), any other's from a copy in an aligned buffer."""

    def fill(fd: int) -> None:
        with _bytes_of(data) as view:

            def take(into: memoryview, start: int) -> None:
                into[:] = view[start : start + len(into)]

            source = view if isinstance(data, ChunkBuffer) else None
            done = _write_direct(fd, len(view), take, source)
            while done < len(view):
                with view[done : done + _SLICE] as piece:
                    done += os.pwrite(fd, piece, done)

    _create_new(target, fill, context, key)


@contextlib.contextmanager
def _bytes_of(data: bytes | bytearray | ChunkBuffer) -> Iterator[memoryview]:
    """``data``'s bytes as unsigned bytes ('B'), released on exit (the caller holds ``data``)."""
    if isinstance(data, ChunkBuffer):
        with data.view() as view:
            yield view
        return
    with memoryview(data) as raw, raw.cast("B") as view:
        yield view


_direct_refused: set[int] = set()  # st_dev of file systems that refused O_DIRECT: page cache there
_spare = AlignedBuffers(keep=_SPARE)  # aligned buffers for the next ``_write_direct``
os.register_at_fork(after_in_child=_spare.after_fork_in_child)


def _write_direct(
    fd: int, length: int, take: Callable[[memoryview, int], None], source: memoryview | None = None
) -> int:
    """Write the 4 KiB-aligned head of ``length`` bytes at offset 0 of the new, empty file
    ``fd`` with ``O_DIRECT``, in slices of up to ``_DIRECT_SLICE`` that ``take(buffer, start)``
    fills with the bytes from ``start``; returns the bytes written (0: the file system
    refused, nothing written; the caller writes the rest through the page cache). ``source``:
    the bytes in memory aligned for ``O_DIRECT`` already (a ``ChunkBuffer``), written as
    they lie, without ``take``'s copy (perf41c: 9 % of the daemon's CPU for 16 MiB files).

    Why: a chunk written through the page cache is copied into newly allocated page-cache
    pages and then written back by the fsync: on the test VM that copy was 60 % of the
    daemon's CPU for 16 MiB files through a workspace mount (``perf``, docs/benchmarks.md,
    "bigwrites20"). A direct write hands the disk the bytes from one aligned buffer (one
    memory copy into a reused buffer) and leaves no page cache behind; the fsync after it
    (``_create_new``) still makes the data, the allocation and the size durable, as before.
    The chunk is read later (flusher, reads of evicted buffers) from the disk.

    The buffer is backed by transparent huge pages where the kernel has them
    (``datahub.aligned_buffers``): each physically contiguous run of the buffer is one segment of the
    disk request, so a 4 MiB write from 2 MiB pages is 2 segments instead of 1,024 of 4 KiB.
    On the test VM's virtual disk a 16 MiB chunk's writes took 9-13 ms from huge pages
    against 24-60 ms from base pages, for the same bytes and half the requests
    (docs/benchmarks.md, "direct41")."""
    head = length - length % _ALIGN
    if not head:
        return 0
    dev = os.fstat(fd).st_dev
    if dev in _direct_refused:
        return 0
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
            raise
        _direct_refused.add(dev)
        return 0
    if source is not None:

        def from_source(done: int) -> int:
            with source[done : min(head, done + _DIRECT_SLICE)] as piece:
                return os.pwrite(fd, piece, done)

        return _direct_writes(fd, head, dev, flags, from_source)
    buf = _spare.take(_DIRECT_SLICE)
    try:
        with buf.region(_DIRECT_SLICE) as aligned:

            def through_buffer(done: int) -> int:
                n = min(head - done, len(aligned))
                with aligned[:n] as piece:
                    take(piece, done)
                    written = 0
                    while written < n:
                        with piece[written:] as rest:
                            written += os.pwrite(fd, rest, done + written)
                return n

            return _direct_writes(fd, head, dev, flags, through_buffer)
    finally:
        _spare.give(buf)


def _direct_writes(fd: int, head: int, dev: int, flags: int, write_at: Callable[[int], int]) -> int:
    """``_write_direct``'s loop: ``write_at(done)`` writes the next piece at offset ``done``
    and says how many bytes, until ``head`` (``fd`` has ``O_DIRECT``; ``flags`` are its flags
    before). A file system that took the flag but refuses the first I/O (an alignment above
    4 KiB) is remembered and the file emptied: the caller writes it all through the page
    cache. The flags are restored either way, for the tail."""
    done = 0
    try:
        while done < head:
            done += write_at(done)
    except OSError as exc:
        if exc.errno != errno.EINVAL or done:
            raise
        _direct_refused.add(dev)
        os.ftruncate(fd, 0)
    finally:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
    return done


def _copy_new(target: Path, fd: int, offset: int, length: int, context: str, key: str) -> None:
    """A new file holding a range of the local file ``fd``: its aligned head read into an
    aligned buffer and written with ``O_DIRECT`` (``_write_direct``), the rest a byte copy
    in the kernel (``copy_range``). A source cut short meanwhile leaves zeros, as a hole."""

    def take(into: memoryview, start: int) -> None:
        got = os.preadv(fd, [into], offset + start)
        if got < len(into):
            into[got:] = bytes(len(into) - got)

    def fill(out: int) -> None:
        done = _write_direct(out, length, take)
        if done < length:
            copy_range(fd, offset + done, out, done, length - done)
        if os.fstat(out).st_size < length:  # the source was cut short meanwhile: zeros, as a hole
            os.ftruncate(out, length)

    _create_new(target, fill, context, key)


class RangeReader(io.RawIOBase):
    """``length`` bytes of file ``fd`` from ``offset``, read in place with ``pread`` as a
    store's put asks for them (a streamed upload: one slice in memory at a time). A source
    cut short meanwhile reads as zeros to the end, so the object has the declared size."""

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self._fd, self._pos, self._end = fd, offset, offset + length

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (the rest: ``size`` None or negative) in one ``pread``, straight
        into the bytes returned. A raw stream's ``read(n)`` would read into a new buffer and
        copy it, and ``read()`` would take 8 KiB at a time (0.5 ms of CPU per MiB): stores
        take a chunk whole (RADOS: ``read()``; S3's single PUT: ``read(n)``)."""
        left = max(0, self._end - self._pos)
        want = left if size is None or size < 0 else min(size, left)
        data = os.pread(self._fd, want, self._pos) if want else b""
        if len(data) < want:
            data += bytes(want - len(data))
        self._pos += want
        return data

    def readall(self) -> bytes:
        return self.read()

    def readinto(self, buffer) -> int:  # type: ignore[override]
        want = min(len(buffer), self._end - self._pos)
        if want <= 0:
            return 0
        n = os.preadv(self._fd, [memoryview(buffer)[:want]], self._pos)
        if n == 0:
            memoryview(buffer)[:want] = bytes(want)
            n = want
        self._pos += n
        return n


def _os_error(exc: OSError, context: str, key: str) -> DatahubError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return NoSpace(
            f"{context}: no space left on the shared tier ({exc.strerror}); free space and retry", key=key
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return AccessDenied(
            f"{context}: the shared tier refuses writes to chunk {key} ({exc.strerror}); "
            "give this process write access to the cache directory",
            key=key,
        )
    return StorageError(f"{context}: local I/O error on chunk {key}: {exc}", key=key)


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

    ``before_last()`` runs before the last chunk is served and may raise: the flusher's writer
    fence. A store makes an object once it has its last byte, so an upload that began while
    this node held the workspace's lease and outlived it fails there instead of landing over
    the new holder's file (review14c); what is left is the time the store takes from the last
    byte read to the object made (docs/writeback.md, "One writer").
    """

    def __init__(
        self,
        size: int,
        chunk_size: int,
        chunk: Callable[[int], bytes],
        on_chunk: Callable[[int], None],
        before_last: Callable[[], None] = lambda: None,
    ) -> None:
        self.size, self.chunk_size, self._chunk, self._on_chunk = size, chunk_size, chunk, on_chunk
        self._before_last = before_last
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
        if start + want >= self.size:
            self._before_last()
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
