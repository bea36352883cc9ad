"""Pack files: many small chunks appended to one file of a local-directory shared tier.

Why: on a local shared tier a small file's close used to create one chunk file and fsync
it. Creating a file is not free: on the ext4 disk of the test VM an ``O_CREAT|O_EXCL``
open alone took 0.25-0.38 ms, as long as the fsync, so a 100 KB chunk cost a create, a
write and an fsync while its journal commit ran beside it. Appending the chunk to a file
that is already open costs a ``pwrite`` and an ``fdatasync``; concurrent writers append
to the same pack and their ``fdatasync`` calls share the file system's journal commits
(bench/writeback/small_file_floor.py, "pack append" rows).

Layout: a pack is the object ``<prefix>/packs/<token>``; a chunk in it is named by the
*member key* ``<prefix>/packs/<token>/<file id>.<index>.<offset>`` (hex). The member key
never exists as a file: it is resolved to a byte range of its pack, and the chunk map
stores the length next to it, as for any chunk. Member keys keep the file id where
``file_id_of`` finds it, so the flusher's "garbage of an open file" check works unchanged.

Lifetime: a member is *live* from the moment its range is reserved until it is deleted
(garbage collection, a failed write, an unreferenced upload; ``abandon`` when it is never to
be written: a reservation is an append in flight until its write ends). A pack is deleted as soon as
it has no live member: the last delete unlinks it and a new pack is started for the next
chunk. So the shared tier holds no object without a live member, like the one-object-
per-chunk layout; what packing adds is *dead space inside a live pack* (a pack lives as
long as any of its chunks), bounded by the pack size. After a restart, the live sets are
rebuilt from the journal (``adopt``); packs no record references are deleted by recovery
like any orphan.

Live members (packs38): a pack's live members are held as ``_Members``, a sorted ``array`` of
their offsets (4 bytes each) and a byte each saying whether it is alive: about 5 bytes a
member where a ``set`` of Python ints took 85 (81 MiB at 10⁶ packed files, held for
the whole session). The membership itself, not only a count, is what decides a deletion:
``delete`` is idempotent (the collector deletes a listed key again after a crash between the
delete and its unlisting; a key listed by an earlier session is no member at all), and a
count would take the second delete of one member off another, still live, member and unlink
the pack under it. Members adopted at an open are appended unsorted and sorted once, at the
first question asked of them; dead entries are dropped once they outnumber both the live
and 64, so a pack kept by a few members holds no more than twice their entries or 64 dead.
A member's offset is all that names it (``_parse``), so no two members may share one: a
member of no bytes still reserves a byte (``reserve``, review21a).

Durability: each append is ``pwrite`` then ``fdatasync`` of the pack, which makes the
appended bytes and the file size durable; a new pack is created with ``O_EXCL`` and its
directory fsync'd before its first member is written. The appends share one descriptor,
and Linux reports a failed writeback once per open file: the first ``fdatasync`` after the
failure gets the error, and one that follows finds the failed pages clean and returns 0
(measured on a loop-mounted ext2 whose device failed once: the second writer's
``fdatasync`` returned 0 and its bytes read back as zeros). So a pack's flushes take turns,
a flush covers every append written before it began (a writer whose bytes a flush already
covered returns without one of its own), and after a failed flush every append of that
pack not covered before it fails too and the pack is sealed: no append is acknowledged
unless a flush that began after its bytes were written succeeded. Members written *alongside* the
journal commit that names them (a new file's first close) are recorded with length and
CRC-32 like in-place chunks: a crash can leave a pack short or with a hole (zeros) where
a concurrent append had not landed, and recovery tells a torn member from a whole one.

Cover records: a new small file's first commit appends its journal record to the pack
right after its chunk, in the same reserved range (``COVER_MAGIC``, the record's length and
CRC-32, the record as JSON), so the pack's one ``fdatasync`` makes both durable and is the
close's only durability point: the journal change is deferred and written into LMDB later
with others (``journal.py``, "Deferred covered commits"); after a crash or a power loss,
recovery finds the record here, ``cover_records``, and replays what LMDB lacks. The record carries its journal ``cover`` number, the file's id, path, size,
mtime and the chunk's length and CRC; the chunk's key follows from where the record lies.

Record formats (the magic's last byte): ``DHWBREC3`` (``COVER_MAGIC_PLACED``, since cover24),
a pack's record, its CRC-32 seeded with ``place_seed``: its journal's ``cover_seed``, the
pack's token and the record's offset, so it verifies at the place it was written and nowhere
else; ``DHWBREC2`` (``COVER_MAGIC``, cover22), seeded with the journal's seed alone: the
records of RADOS and S3 chunk objects, which lie with their object (an xattr, the object's
metadata), and the pack records of journals written before cover24; ``DHWBREC1``
(``COVER_MAGIC_V1``), unseeded, from before cover22. Recovery still reads the older two, for the
epochs their journal wrote them in (``records.cover_is_ours``).

``DHWBREC4`` (``COVER_MAGIC_KEYED``, since wbgaps25): a pack's record as ``DHWBREC3``, its JSON
followed by a 16-byte keyed MAC (``cover_mac``: BLAKE2b keyed with the journal's secret
``cover_key``, of the record's place and JSON); its length field counts the MAC. Why: a CRC's
seed is no secret (``cover_seed`` follows from the journal id, the place from the pack's token
and the offset), and recovery reads users' file bytes too, so a user who wrote a file holding a
``DHWBREC3`` record computed for the place it would land at had recovery replay a file never
written, in the place of an acknowledged one whose id it took. The key is random per journal,
kept in the journal's meta (LMDB, on the node) and its shared log's header, neither of which a
workspace's user reads through the workspace.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import hmac
import itertools
import json
import operator
import os
import secrets
import struct
import threading
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from datahub.storage.local import pread_full

PACK_DIR = "packs"
PACK_CHUNK_MAX = 1 << 20  # chunks below this go into packs; bigger ones get a file of their own
COVER_MAGIC_KEYED = b"DHWBREC4"  # a pack's record: ``DHWBREC3`` and a keyed MAC after its JSON
COVER_MAGIC_PLACED = b"DHWBREC3"  # a pack's record: its CRC-32 seeded with ``place_seed``
COVER_MAGIC = b"DHWBREC2"  # a record whose CRC-32 is seeded with its journal's ``cover_seed``
COVER_MAGIC_V1 = b"DHWBREC1"  # a record from before cover22: its CRC-32 is unseeded
_COVER_FAMILY = b"DHWBREC"  # every magic starts with it; the byte after it says which
_PLACE_OFFSET = struct.Struct(">Q")  # a record's offset in its pack, as ``place_seed`` hashes it
NO_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)  # the process's or the system's descriptors are all taken
_COVER_HEAD = struct.Struct(">II")  # record length, CRC-32 of the record
COVER_MAC_BYTES = 16  # a keyed record's MAC (``cover_mac``): a forger's guess holds one chance in 2**128
_MAC_PERSON = b"datahub cover"  # BLAKE2b's personalisation: no other use of the key makes these MACs
#: ``json.dumps(..., separators=(",", ":"))``'s encoder, built once (its bytes exactly)
_COMPACT = json.JSONEncoder(separators=(",", ":"))


@functools.lru_cache(maxsize=64)  # asked at every covered close: a journal's seed never changes
def cover_seed(journal: str) -> int:
    """The CRC-32 seed of journal ``journal``'s cover records. Why (cover22): recovery reads
    every byte of a pack, a user's file's too, and a record copied from another workspace's
    pack (a backup, a copy of the shared tier) verified and was replayed as a file here; with
    its CRC seeded by the journal that wrote it, bytes from anywhere else fail it (but for
    one chance in 2**32), at no byte and no CPU more than an unseeded CRC."""
    return zlib.crc32(b"datahub cover record of journal " + journal.encode())


def place_seed(seed: int, token: str, offset: int) -> int:
    """The CRC-32 seed of a record of the journal of ``seed`` (``cover_seed``) written at
    ``offset`` of pack ``token`` (``COVER_MAGIC_PLACED``). Why (cover24): recovery reads every
    byte of the journal's packs, and a copy of one of its own records (a user's file holding a
    pack slot: a chunk and the record after it) verified with the journal's seed at the copy's
    place; replayed from there, the acknowledged file named the range of the file holding the
    copy, and went with that file's pack. Seeded with its place, a record's bytes verify nowhere
    else: two offsets of one pack (below 2**32 apart) always give two seeds (a CRC-32 tells
    apart any two messages that differ within 32 bits), other packs' but for one chance in
    2**32. No byte more; 0.5 µs a record on the test VM under load, and the close's whole
    place step (finding the key's pack and offset, then this) 5-7 µs of a close's ~1 ms of CPU
    (``bench/writeback/cover_place_cost.py``)."""
    return zlib.crc32(token.encode() + _PLACE_OFFSET.pack(offset), seed)


def new_cover_key() -> bytes:
    """A journal's secret ``cover_key`` (32 random bytes), made once, at the first recovery of
    a datahub since wbgaps25 (``COVER_MAGIC_KEYED``): the system's CSPRNG."""
    return os.urandom(32)


@functools.lru_cache(maxsize=64)  # a journal's key never changes; asked at every covered close
def _keyed(key: bytes) -> hashlib.blake2b:
    """BLAKE2b keyed with ``key``, nothing hashed yet (``cover_mac`` copies it)."""
    return hashlib.blake2b(key=key, digest_size=COVER_MAC_BYTES, person=_MAC_PERSON)


def cover_mac(key: bytes, place: tuple[str, int], body: bytes | memoryview) -> bytes:
    """The keyed MAC of a record of JSON ``body`` written at ``place`` (pack token, offset):
    BLAKE2b keyed with the journal's ``cover_key``, ``COVER_MAC_BYTES`` long. Why (wbgaps25):
    the seeded CRC of ``DHWBREC3`` binds a record to its journal and place, but anyone who knows
    the journal id and the place can compute it; without the key no user's bytes make a record
    that verifies (module docstring). 2-4 µs a record on the test VM under load, the close's
    keyed record step 4-6 µs more than cover24's (``bench/writeback/cover_place_cost.py``)."""
    token, offset = place
    mac = _keyed(key).copy()  # a keyed state copied: 1.7 µs a record where a new one took 2.6
    mac.update(token.encode() + _PLACE_OFFSET.pack(offset))
    mac.update(body)
    return mac.digest()


def encode_cover(
    cover: int,
    record: dict,
    seed: int | None = None,
    place: tuple[str, int] | None = None,
    key: bytes | None = None,
) -> bytes:
    """A cover record's bytes: magic, length, CRC-32, JSON. The cover number is written with a
    fixed width, so the length is known before the number is (``cover=0``). ``seed``: the
    journal's ``cover_seed``; None writes the format from before cover22 (``COVER_MAGIC_V1``,
    unseeded CRC), as the journals that recovery still accepts them from wrote them. ``place``:
    (pack token, offset of the record in it) of a record written in a pack, seeded with its
    place too (``COVER_MAGIC_PLACED``, ``place_seed``); None: ``COVER_MAGIC``, seeded with
    ``seed`` alone (a RADOS or S3 object's record, or a pack's from before cover24). ``key``:
    the journal's ``cover_key``, for a pack's record (``COVER_MAGIC_KEYED``); with ``place``
    None it makes the template ``renumber_cover`` places (its MAC zeros: it verifies nowhere)."""
    body = _COMPACT.encode({"c": f"{cover:016x}", **record}).encode()
    if key is not None:
        if seed is None:
            raise ValueError("a keyed record is seeded with its journal's seed too (encode_cover)")
        template = (
            COVER_MAGIC_KEYED
            + _COVER_HEAD.pack(len(body) + COVER_MAC_BYTES, 0)
            + body
            + bytes(COVER_MAC_BYTES)
        )
        return template if place is None else renumber_cover(template, cover, seed, place, key)
    if seed is None:
        if place is not None:
            raise ValueError("a record placed in a pack is seeded with its journal's seed too (encode_cover)")
        return COVER_MAGIC_V1 + _COVER_HEAD.pack(len(body), zlib.crc32(body)) + body
    if place is not None:
        return (
            COVER_MAGIC_PLACED
            + _COVER_HEAD.pack(len(body), zlib.crc32(body, place_seed(seed, *place)))
            + body
        )
    return COVER_MAGIC + _COVER_HEAD.pack(len(body), zlib.crc32(body, seed)) + body


_COVER_BODY_AT = len(COVER_MAGIC) + _COVER_HEAD.size
_COVER_NUMBER_AT = _COVER_BODY_AT + len(b'{"c":"')  # the number's 16 hex digits (``encode_cover``)


def renumber_cover(
    trailer: bytes,
    cover: int,
    seed: int | None = None,
    place: tuple[str, int] | None = None,
    key: bytes | None = None,
) -> bytes:
    """``encode_cover(cover, record, seed, place)`` made from ``trailer``, ``encode_cover(0,
    record, seed)``'s bytes (unplaced: the place is known once the room is reserved): the number
    has a fixed width, so only its digits, the CRC and, for a ``place``, the magic change. Why
    (small41): a new small file's close encoded its record twice, once for the room to reserve
    and once numbered, and the JSON was a tenth of the daemon's Python samples per file (loop20).
    A keyed template (``encode_cover(0, record, seed, key=key)``) is renumbered with ``key`` and
    a ``place``: its CRC seeded with the place and its MAC made (``cover_mac``)."""
    if not 0 <= cover < 1 << 64:
        raise ValueError(f"cover number {cover} does not fit the record's 16 hex digits")
    if (key is not None) != trailer.startswith(COVER_MAGIC_KEYED):
        raise ValueError("a keyed cover record is renumbered with the key it was encoded with (encode_cover)")
    if key is not None:
        if seed is None or place is None:
            raise ValueError(
                "a keyed record is renumbered with its journal's seed and its place (encode_cover)"
            )
        body = bytearray(trailer)
        body[_COVER_NUMBER_AT : _COVER_NUMBER_AT + 16] = b"%016x" % cover
        with memoryview(body) as view:
            text = view[_COVER_BODY_AT:-COVER_MAC_BYTES]
            crc = zlib.crc32(text, place_seed(seed, *place))
            body[-COVER_MAC_BYTES:] = cover_mac(key, place, text)
            del text
        _COVER_HEAD.pack_into(body, len(COVER_MAGIC), len(body) - _COVER_BODY_AT, crc)
        return bytes(body)
    if (seed is None) != trailer.startswith(COVER_MAGIC_V1):
        raise ValueError("a cover record is renumbered with the seed it was encoded with (encode_cover)")
    if seed is None and place is not None:
        raise ValueError("a record placed in a pack is seeded with its journal's seed too (encode_cover)")
    body = bytearray(trailer)
    body[_COVER_NUMBER_AT : _COVER_NUMBER_AT + 16] = b"%016x" % cover
    with memoryview(body) as view:
        if seed is None:
            crc = zlib.crc32(view[_COVER_BODY_AT:])
        elif place is None:
            body[: len(COVER_MAGIC)] = COVER_MAGIC
            crc = zlib.crc32(view[_COVER_BODY_AT:], seed)
        else:
            body[: len(COVER_MAGIC)] = COVER_MAGIC_PLACED
            crc = zlib.crc32(view[_COVER_BODY_AT:], place_seed(seed, *place))
        _COVER_HEAD.pack_into(body, len(COVER_MAGIC), len(body) - _COVER_BODY_AT, crc)
    return bytes(body)


def _verified(
    magic: bytes,
    body: bytes,
    crc: int,
    seed: int | None,
    place: tuple[str, int] | None,
    key: bytes | None = None,
) -> dict | None:
    """The record ``body`` holds if its CRC verifies, else None. A placed record
    (``COVER_MAGIC_PLACED``) verifies only with ``seed``, its journal's, at ``place``, (pack
    token, offset) where it was written (never with either None): it comes back with ``seeded``
    and ``placed`` True. A seeded one (``COVER_MAGIC``) verifies only with ``seed`` (never with
    None: no journal's) and comes back with ``seeded`` True. One from before cover22
    (``COVER_MAGIC_V1``) verifies unseeded and comes back with neither. Neither flag is taken
    from the JSON: ``records.cover_is_ours`` accepts an unplaced record only of an epoch its
    journal wrote no placed records in, an unseeded one only of an epoch before it seeded them.
    A keyed one (``COVER_MAGIC_KEYED``) verifies only with ``key`` (the journal's ``cover_key``)
    as a placed one does, its MAC too, and comes back with ``keyed`` True as well: recovery
    accepts a record without it only of an epoch its journal keyed none in
    (``records.must_be_keyed``)."""
    if magic == COVER_MAGIC_KEYED:
        if seed is None or place is None or key is None or len(body) < COVER_MAC_BYTES:
            return None
        body, mac = body[:-COVER_MAC_BYTES], body[-COVER_MAC_BYTES:]
        if zlib.crc32(body, place_seed(seed, *place)) != crc or not hmac.compare_digest(
            mac, cover_mac(key, place, body)
        ):
            return None
    elif magic == COVER_MAGIC_PLACED:
        if seed is None or place is None or zlib.crc32(body, place_seed(seed, *place)) != crc:
            return None
    elif magic == COVER_MAGIC:
        if seed is None or zlib.crc32(body, seed) != crc:
            return None
    elif magic != COVER_MAGIC_V1 or zlib.crc32(body) != crc:
        return None
    try:
        record = json.loads(body)
        record["c"] = int(record["c"], 16)
    except (ValueError, KeyError, TypeError):
        return None
    record.pop("seeded", None)
    record.pop("placed", None)
    record.pop("keyed", None)
    if magic != COVER_MAGIC_V1:
        record["seeded"] = True
    if magic in (COVER_MAGIC_PLACED, COVER_MAGIC_KEYED):
        record["placed"] = True
    if magic == COVER_MAGIC_KEYED:
        record["keyed"] = True
    return record


def _decode_covers(
    data: bytes,
    *,
    seed: int | None = None,
    token: str | None = None,
    base: int = 0,
    key: bytes | None = None,
) -> Iterator[tuple[int, dict]]:
    """(offset, record) of every whole cover record in ``data`` that verifies with ``seed``
    (``_verified``); ``data`` lies at offset ``base`` of pack ``token`` (None: of no pack, so
    no placed record verifies). A torn or overwritten record fails its CRC and is skipped;
    chunk bytes that happen to hold the magic fail it too, and so does another journal's, and
    a copy of a placed record anywhere but where it was written."""
    at = data.find(_COVER_FAMILY)
    while at >= 0:
        head = at + len(COVER_MAGIC)
        if head + _COVER_HEAD.size <= len(data):
            length, crc = _COVER_HEAD.unpack_from(data, head)
            body = data[head + _COVER_HEAD.size : head + _COVER_HEAD.size + length]
            if len(body) == length:
                place = None if token is None else (token, base + at)
                record = _verified(data[at:head], body, crc, seed, place, key)
                if record is not None:
                    yield at, record
        at = data.find(_COVER_FAMILY, at + 1)


COVER_PIECE = 1 << 20  # bytes of a pack read at a time for its cover records


def _file_covers(
    fd: int,
    piece: int = COVER_PIECE,
    *,
    seed: int | None = None,
    token: str | None = None,
    key: bytes | None = None,
) -> Iterator[tuple[int, dict]]:
    """``_decode_covers`` of a whole pack file (of pack ``token``: None, no placed record
    verifies), read ``piece`` bytes at a time (it read the
    pack whole: up to ``writeback_pack_bytes``, 32 MiB, held while the replay ran). A record
    found in a piece whose body runs past it is read alone, from where its length says."""
    size = os.fstat(fd).st_size
    lead = len(COVER_MAGIC) + _COVER_HEAD.size
    start = 0
    while start < size:
        data = pread_full(fd, min(piece, size - start) + lead - 1, start)  # a short read skips no record
        at = data.find(_COVER_FAMILY)
        while 0 <= at < piece:
            if at + lead <= len(data):
                length, _crc = _COVER_HEAD.unpack_from(data, at + len(COVER_MAGIC))
                end = at + lead + length
                if start + end <= size:
                    whole = data[at:end] if end <= len(data) else pread_full(fd, lead + length, start + at)
                    record = decode_cover(
                        whole, seed=seed, place=None if token is None else (token, start + at), key=key
                    )
                    if record is not None:
                        yield start + at, record
            at = data.find(_COVER_FAMILY, at + 1)
        start += piece


def decode_cover(
    data: bytes,
    *,
    seed: int | None = None,
    place: tuple[str, int] | None = None,
    key: bytes | None = None,
) -> dict | None:
    """The cover record ``data`` starts with, whole (``encode_cover``'s bytes) and verified
    with ``seed`` (``_verified``), else None. ``place``: (pack token, offset) where ``data``
    was read (None: not from a pack, so a placed record does not verify). ``key``: the
    journal's ``cover_key`` (None: no keyed record verifies)."""
    token, base = place if place is not None else (None, 0)
    for at, record in _decode_covers(data, seed=seed, token=token, base=base, key=key):
        return record if at == 0 else None
    return None


class _Members:
    """The live members of one pack: their offsets in a sorted ``array`` and a byte each that
    says whether it is alive (the module docstring, "Live members"). Not thread-safe:
    ``Packs._lock`` guards it."""

    __slots__ = ("_offsets", "_alive", "_live", "_pending")

    def __init__(self) -> None:
        self._offsets = array("I")  # sorted, unique
        self._alive = bytearray()  # 1: ``_offsets[i]`` is a live member, 0: it died
        self._live = 0
        self._pending: array | None = None  # adopted, not yet sorted in (any order, repeats)

    def __len__(self) -> int:
        self._settle()
        return self._live

    def __bool__(self) -> bool:
        return len(self) > 0

    def __contains__(self, offset: int) -> bool:
        self._settle()
        i = self._index(offset)
        return i >= 0 and bool(self._alive[i])

    def add(self, offset: int) -> None:
        """Make ``offset`` a live member (a new reservation: above every member so far, appended)."""
        if self._pending is None and (not self._offsets or offset > self._offsets[-1]):
            self._offsets = _append_wide(self._offsets, offset)
            self._alive.append(1)
            self._live += 1
        else:
            self.adopt(offset)

    def adopt(self, offset: int) -> None:
        """Make ``offset`` a live member, in any order (an open adopts the journal's keys): kept
        aside and sorted in once, at the next question."""
        if self._pending is None:
            self._pending = array(self._offsets.typecode)
        self._pending = _append_wide(self._pending, offset)

    def discard(self, offset: int) -> int | None:
        """Make ``offset`` dead: the live members left, None if it was none (one call where
        a question and a count were three: ``delete`` runs per garbage chunk)."""
        self._settle()
        i = self._index(offset)
        if i < 0 or not self._alive[i]:
            return None
        self._alive[i] = 0
        self._live -= 1
        if len(self._offsets) - self._live > max(self._live, 64):  # the dead outnumber the live
            self._offsets = array(self._offsets.typecode, itertools.compress(self._offsets, self._alive))
            self._alive = bytearray(b"\x01") * self._live
        return self._live

    def _index(self, offset: int) -> int:
        offsets = self._offsets
        i = bisect_left(offsets, offset)
        return i if i < len(offsets) and offsets[i] == offset else -1

    def _settle(self) -> None:
        """Sort the adopted offsets in, live (members before or not)."""
        pending = self._pending
        if pending is None:
            return
        self._pending = None
        new = sorted(pending)
        del pending
        if self._offsets:  # members before (rare: an adoption is an open's): merged by value
            alive = dict(zip(self._offsets, self._alive, strict=True))
            alive.update(dict.fromkeys(new, 1))
            new = sorted(alive)
            flags = bytearray(map(alive.__getitem__, new))
            del alive
        elif any(map(operator.eq, new, itertools.islice(new, 1, None))):  # repeats
            new = sorted(set(new))
            flags = bytearray(b"\x01") * len(new)
        else:  # an open's adoption: no member before, no repeat (one record per chunk)
            flags = bytearray(b"\x01") * len(new)
        self._offsets = array("Q" if new[-1] > 0xFFFFFFFF else "I", new)
        self._alive, self._live = flags, flags.count(1)


def _append_wide(offsets: array, offset: int) -> array:
    """``offsets`` with ``offset`` appended, widened to 8-byte items if it needs them."""
    if offset > 0xFFFFFFFF and offsets.typecode == "I":
        offsets = array("Q", offsets)
    offsets.append(offset)
    return offsets


@dataclass
class _Pack:
    token: str
    fd: int | None
    size: int = 0  # bytes reserved so far (the next member's offset)
    live: _Members = field(default_factory=_Members)  # its live members (by offset)
    writing: int = 0  # appends in flight (the fd stays open while > 0)
    sealed: bool = False  # no more reservations (full, or its last member died)
    doomed: bool = False  # no live member left: unlinked once no append is in flight
    written: int = 0  # appends whose bytes are in the pack (a sequence number)
    durable: int = 0  # appends covered by a flush that succeeded
    failed: OSError | None = None  # a flush failed: no later append of this pack succeeds
    flushing: threading.Lock = field(default_factory=threading.Lock)  # one flush at a time


class Packs:
    """The packs of one workspace's chunk prefix under a local shared-tier ``root``."""

    def __init__(self, root: Path, prefix: str, pack_bytes: int) -> None:
        self.root = root
        self.prefix = f"{prefix}/{PACK_DIR}"
        self._head = self.prefix + "/"  # what every key of these packs starts with
        self._depth = self.prefix.count("/")  # a pack object's key has one "/" more, a member two
        self.pack_bytes = pack_bytes
        self._lock = threading.Lock()  # never held during I/O on a member
        self._packs: dict[str, _Pack] = {}
        self._current: _Pack | None = None

    # --- keys ---------------------------------------------------------------------------------
    def owns(self, key: str) -> bool:
        """Whether ``key`` is a member key (a range of a pack), not an object of its own."""
        return key.startswith(self._head) and key.count("/") == self._depth + 2

    def is_pack(self, key: str) -> bool:
        """Whether object ``key`` (from a listing) is a pack file."""
        return key.startswith(self._head) and key.count("/") == self._depth + 1

    def object_of(self, key: str) -> str:
        """The pack object holding member ``key``."""
        return key.rsplit("/", 1)[0]

    def _parse(self, key: str) -> tuple[str, int]:
        token = key[len(self.prefix) + 1 :].split("/", 1)[0]
        return token, int(key.rsplit(".", 1)[1], 16)

    def path_of(self, key: str) -> tuple[Path, int]:
        """(pack file, offset) of member ``key``."""
        token, offset = self._parse(key)
        return self.root / self.prefix / token, offset

    def member_key(self, token: str, file_id: int, index: int, offset: int) -> str:
        return f"{self.prefix}/{token}/{file_id:x}.{index}.{offset:x}"

    def cover_place(self, key: str, length: int) -> tuple[str, int]:
        """(pack token, offset) of the cover record written after member ``key`` of ``length``
        bytes (``write``'s ``trailer``): where ``place_seed`` binds it. ``_parse``, cut down:
        asked at every covered close."""
        end = key.rfind("/")
        return key[len(self._head) : end], int(key[key.rfind(".") + 1 :], 16) + length

    def cover_records(
        self, pack: str, seed: int | None = None, key: bytes | None = None
    ) -> Iterator[tuple[str, dict]]:
        """(member key, record) of every whole cover record in pack object ``pack`` that
        verifies with ``seed`` (and ``key``, a keyed one) and, a placed one, at its offset in
        this pack (``_verified``; recovery after a power loss: the file system's pages of the
        whole pack are read once, a ``COVER_PIECE`` at a time)."""
        token = pack.rsplit("/", 1)[1]
        with open(self.root / pack, "rb", buffering=0) as fh:
            for at, record in _file_covers(fh.fileno(), seed=seed, token=token, key=key):
                offset = at - record["len"]
                if offset >= 0:
                    yield self.member_key(token, record["id"], 0, offset), record

    # --- writing ------------------------------------------------------------------------------
    def reserve(self, file_id: int, index: int, length: int, extra: int = 0) -> str:
        """Reserve ``length`` bytes at the end of the current pack; the member key naming them.

        The member is live from now on: ``write`` fills it, ``delete`` gives it up. ``extra``
        bytes more are reserved after it for a cover record (``write``'s ``trailer``).

        A member of no bytes still takes one: members are known by their offset alone
        (``_parse``), and an empty one sharing the next member's offset would be that member to
        the live set, so giving it up would unlink the pack under the other (review21a).
        """
        length = max(length + extra, 1)
        with self._lock:
            pack = self._current
            if pack is None or pack.sealed or pack.size + length > self.pack_bytes and pack.size > 0:
                if pack is not None:
                    self._seal(pack)
                pack = self._current = self._new_pack()
            offset = pack.size
            pack.size += length
            pack.live.add(offset)
            pack.writing += 1
        return f"{self.prefix}/{pack.token}/{file_id:x}.{index}.{offset:x}"

    def write(self, key: str, data: bytes | bytearray | memoryview, trailer: bytes = b"") -> None:
        """Write a reserved member and make it durable (``pwrite`` + ``fdatasync``); a
        ``trailer`` (a cover record, reserved with ``extra``) goes right after it, under the
        same flush."""
        token, offset = self._parse(key)
        with self._lock:
            pack = self._packs[token]
        try:
            self._refuse_if_failed(pack, key)
            _pwrite_all(pack.fd, data, offset, trailer)  # type: ignore[arg-type]
            self._flush(pack, key)
        finally:
            with self._lock:
                pack.writing -= 1
                self._close_if_idle(pack)
                unlink = pack.doomed and pack.writing == 0
            if unlink:
                self._unlink(pack)

    def copy_in(self, key: str, src_fd: int, src_offset: int, length: int) -> None:
        """``write`` of a reserved member whose bytes are ``length`` bytes of file ``src_fd``
        at ``src_offset``: copied by the kernel (``copy_range``, a byte copy), then ``fdatasync``."""
        token, offset = self._parse(key)
        with self._lock:
            pack = self._packs[token]
        try:
            self._refuse_if_failed(pack, key)
            copy_range(src_fd, src_offset, pack.fd, offset, length)  # type: ignore[arg-type]
            self._flush(pack, key)
        finally:
            with self._lock:
                pack.writing -= 1
                self._close_if_idle(pack)
                unlink = pack.doomed and pack.writing == 0
            if unlink:
                self._unlink(pack)

    def _flush(self, pack: _Pack, key: str) -> None:
        """Make member ``key``'s bytes (written by the caller) durable, or raise.

        Flushes of a pack take turns: the errors of one flush are reported to it alone."""
        with self._lock:
            pack.written += 1
            mine = pack.written
        with pack.flushing:
            self._refuse_if_failed(pack, key)
            if pack.durable >= mine:
                return  # a flush that began after these bytes were written succeeded
            with self._lock:
                upto = pack.written  # every append numbered so far has written its bytes
            try:
                os.fdatasync(pack.fd)  # type: ignore[arg-type]
            except OSError as exc:
                pack.failed = exc
                with self._lock:
                    self._seal(pack)  # its descriptor stays open while appends are in flight
                raise
            pack.durable = upto

    def _refuse_if_failed(self, pack: _Pack, key: str) -> None:
        failed = pack.failed
        if failed is not None:
            raise OSError(
                failed.errno or errno.EIO,
                f"member {key} was not made durable: an earlier flush of pack {pack.token} failed "
                f"({failed.strerror or failed}), and what it did not write is lost; write the file again",
            )

    def _new_pack(self) -> _Pack:
        """Create the next pack file (caller holds ``_lock``; once per ``pack_bytes``)."""
        directory = self.root / self.prefix
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        token = secrets.token_hex(8)
        # owner-only, as every file of a workspace's bytes (docs/writeback.md, "Files and their modes")
        fd = os.open(directory / token, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the pack's name is durable before any member is acknowledged
            finally:
                os.close(dir_fd)
        except BaseException:  # no descriptor for the directory, say: no pack, none left open (fix21)
            os.close(fd)
            try:
                os.unlink(directory / token)
            except OSError:
                pass  # an orphan no record names: the next open's recovery deletes it
            raise
        pack = self._packs[token] = _Pack(token, fd)
        return pack

    def _seal(self, pack: _Pack) -> None:
        pack.sealed = True
        if self._current is pack:
            self._current = None
        self._close_if_idle(pack)

    def _close_if_idle(self, pack: _Pack) -> None:
        if pack.sealed and pack.writing == 0 and pack.fd is not None:
            os.close(pack.fd)
            pack.fd = None

    # --- lifetime -----------------------------------------------------------------------------
    def adopt(self, keys: list[str]) -> None:
        """After a restart: these members are referenced by the journal (their packs are sealed)."""
        with self._lock:
            for key in keys:
                token, offset = self._parse(key)
                pack = self._packs.get(token)
                if pack is None:
                    pack = self._packs[token] = _Pack(token, None, sealed=True)
                pack.live.adopt(offset)

    def delete(self, key: str) -> None:
        """Give up member ``key``; the pack is unlinked when that was its last live member.

        Idempotent: unknown members are ignored (after a restart, a pack with no member the
        journal references was deleted by recovery as an orphan).
        """
        token, offset = self._parse(key)
        with self._lock:
            pack = self._packs.get(token)
            left = pack.live.discard(offset) if pack is not None else None
            if left is None or left > 0:
                return  # not a live member (given up before, or never), or not the last
            self._seal(pack)  # nothing may be appended to a pack about to be unlinked
            pack.doomed = True
            if pack.writing:
                return  # the last append in flight unlinks it
        self._unlink(pack)

    def abandon(self, key: str) -> None:
        """Give up member ``key``, reserved and never to be written: the append its
        reservation began ends here, then as ``delete``. The caller's word: no ``write`` or
        ``copy_in`` of it began or will (a commit that failed before any write, say), and it
        gives the key up once.

        Why (fix21): a reservation counts as an append in flight until ``write`` ends it, so
        that a ``delete`` racing the append leaves the unlink to it. A key given up unwritten
        with ``delete`` alone kept its pack's descriptor open, and the pack linked when it had
        no other member, until the next open's recovery."""
        token, offset = self._parse(key)
        with self._lock:
            pack = self._packs.get(token)
            if pack is None:
                return
            pack.writing -= 1
            if pack.live.discard(offset) == 0:
                self._seal(pack)  # nothing may be appended to a pack about to be unlinked
                pack.doomed = True
            self._close_if_idle(pack)
            unlink = pack.doomed and pack.writing == 0
        if unlink:
            self._unlink(pack)

    def _unlink(self, pack: _Pack) -> None:
        with self._lock:
            if self._packs.get(pack.token) is not pack:
                return
            del self._packs[pack.token]
        try:
            os.unlink(self.root / self.prefix / pack.token)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Close every pack file; one with an append in flight is closed when that ends (a
        late ``pwrite`` must never reach a descriptor number reused by another file)."""
        with self._lock:
            for pack in self._packs.values():
                pack.sealed = True
                self._close_if_idle(pack)
            self._current = None


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int, trailer: bytes = b"") -> None:
    """``data`` then ``trailer`` at ``offset``: one ``pwritev`` in the usual case."""
    with memoryview(data) as view:
        length = len(view)
        done = os.pwritev(fd, [view, trailer], offset) if trailer else 0
        while done < length:
            with view[done:] as rest:
                done += os.pwrite(fd, rest, offset + done)
    while done < length + len(trailer):
        done += os.pwrite(fd, trailer[done - length :], offset + done)


def copy_range(src_fd: int, src_offset: int, dst_fd: int, dst_offset: int, length: int) -> None:
    """Copy ``length`` bytes between two files in the kernel, as a **byte copy**: ``splice``
    from the source into a pipe and from the pipe into the destination (the page-cache copy
    ``copy_file_range`` makes on ext4). Never shared extents: ``copy_file_range`` is a
    reflink on xfs and btrfs, and a staged file that shared its blocks with the chunks of
    its last commit needed new blocks (copy-on-write) for any rewrite of them, so a
    ``write(2)`` *inside its reservation* could fail for space half done, unseen by the
    daemon, and the next close commit the torn file (docs/writeback.md, "A full staging
    disk": the reservation is what makes such a failure visible). Where the kernel refuses
    to splice, or no pipe can be made (out of descriptors), 1 MiB ``pread``/``pwrite``
    slices. A source shorter than ``length`` leaves the rest as a hole (zeros)."""
    done = 0
    try:
        done = _splice_range(src_fd, src_offset, dst_fd, dst_offset, length)
    except OSError as exc:
        # no pipe to be had (EMFILE/ENFILE: the daemon is out of descriptors) costs a close
        # nothing but the slices below, which need none (emfile12)
        if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS, *NO_DESCRIPTORS):
            raise
        done = getattr(exc, "done", 0)  # none before the pipe was made
    else:
        return
    while done < length:
        piece = os.pread(src_fd, min(1 << 20, length - done), src_offset + done)
        if not piece:
            break
        written = 0
        while written < len(piece):
            written += os.pwrite(dst_fd, piece[written:], dst_offset + done + written)
        done += len(piece)


_PIPE_BYTES = 1 << 20


def _splice_range(src_fd: int, src_offset: int, dst_fd: int, dst_offset: int, length: int) -> int:
    """``splice`` the range through a pipe of up to 1 MiB (explicit offsets on both files:
    a pack's descriptor is shared by concurrent appends, its file position means nothing).
    Returns the bytes copied (fewer: the source ended); an ``OSError`` carries ``done``, the
    bytes of the range known to be in place."""
    done = 0
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        try:
            size = fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:  # over pipe-max-size or the user's pipe quota: the default (64 KiB)
            size = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)
        while done < length:
            n = os.splice(src_fd, w, min(size, length - done), offset_src=src_offset + done)
            if n == 0:
                break  # the source ended early (truncated meanwhile): the rest reads as zeros
            moved = 0
            while moved < n:
                put = os.splice(r, dst_fd, n - moved, offset_dst=dst_offset + done + moved)
                if put <= 0:  # no progress and no error: never loop forever
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
                moved += put
            done += n
        return done
    except OSError as exc:
        exc.done = done  # type: ignore[attr-defined]
        raise
    finally:
        os.close(r)
        os.close(w)
