"""A small file's chunk fingerprint is xxh3, tagged, and the CRC-32 of older records still verifies
(issue 41, small41c; ``chunks.chunk_fingerprint``, ``fingerprint_matches``).

A new small file's first close names its chunk before the chunk is durable: its cover record in
the pack (and a journal record's ``unverified``) carries the chunk's length and fingerprint, and
recovery keeps the file only if the bytes found match. The fingerprint was the chunk's CRC-32 (an
int); it is now ``"x3:<xxh3-64>"`` (a string), so a pack written before still replays by its int.
Each case crashes a workspace whose deferred commits live only in its packs' records and reopens
it: the files come back from the records, or, where a chunk's bytes were changed under its
record, that file is dropped (the fingerprint was checked, of either kind).
"""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path

import pytest
import xxhash

from datahub.errors import NotFound, StorageError
from datahub.writeback.chunks import chunk_fingerprint, fingerprint_matches
from datahub.writeback.packs import _file_covers, cover_seed, encode_cover
from tests.writeback.conftest import CHUNK, Env, make_env, write

NAMES = [f"f{n}" for n in range(3)]


def _payload(path: str) -> bytes:
    return hashlib.sha256(path.encode()).digest() * (3000 // 32)  # one chunk: a covered first close


def _covers(root: Path, ws) -> list[tuple[Path, int, dict]]:
    """(pack, offset of the record, record) of every cover record of ``ws``'s journal in the
    packs under ``root``."""
    found = []
    for pack in sorted(p for p in root.rglob("*") if p.is_file() and p.parent.name == "packs"):
        fd = os.open(pack, os.O_RDONLY)
        try:
            found += [
                (pack, at, record)
                for at, record in _file_covers(fd, seed=_seed(ws), token=pack.name, key=ws.chunks.cover_key)
            ]
        finally:
            os.close(fd)
    return found


def _written(tmp_path: Path) -> tuple[Env, object]:
    """A workspace whose small files are acknowledged by their packs' records alone."""
    env = make_env(tmp_path)  # packs: covered first closes
    ws = env.open()
    ws.journal.defer_seconds = 3600.0  # written into LMDB by nothing but a transaction
    write(ws, "warm", b"w")  # the first create reserves a block of file ids (a transaction)
    for name in NAMES:
        write(ws, name, _payload(name))
    assert ws.journal.deferred() >= len(NAMES)
    return env, ws


def _seed(ws) -> int:
    return cover_seed(ws.chunks.journal)


def _rewrite(pack: Path, at: int, record: dict, seed: int, key: bytes) -> None:
    """Put ``record`` where the record at ``at`` is (no longer than it: an int fingerprint is
    shorter), placed there (cover24) and keyed (wbgaps25)."""
    cover = record.pop("c")
    record.pop("seeded", None)  # what the scan says of it (cover22), not a field of its bytes
    record.pop("placed", None)  # nor is this (cover24)
    record.pop("keyed", None)  # nor this (wbgaps25)
    with open(pack, "r+b") as f:
        f.seek(at)
        f.write(encode_cover(cover, record, seed, (pack.name, at), key))


def _damage(pack: Path, at: int, record: dict) -> None:
    """One byte of the chunk before the record flipped (its length and the record left whole)."""
    with open(pack, "r+b") as f:
        f.seek(at - record["len"] + 7)
        byte = f.read(1)
        f.seek(at - record["len"] + 7)
        f.write(bytes([byte[0] ^ 0xFF]))


def _survivors(ws) -> dict[str, str]:
    """name -> "whole", "dropped" (recovery found its chunk torn) or "wrong" (bytes not written)."""
    out = {}
    for name in NAMES:
        try:
            with ws.open(name) as fh:
                out[name] = "whole" if fh.read(0, CHUNK) == _payload(name) else "wrong"
        except NotFound:
            out[name] = "dropped"
    return out


def test_a_small_files_record_carries_the_xxh3_of_its_chunk_and_replays(tmp_path: Path) -> None:
    env, ws = _written(tmp_path)
    try:
        records = {r["path"]: r for _, _, r in _covers(tmp_path, ws)}
        for name in NAMES:
            assert records[name]["crc"] == f"x3:{xxhash.xxh3_64_intdigest(_payload(name)):016x}"
            assert records[name]["placed"]  # bound to its pack and offset (cover24)
        ws2 = env.crash_and_reopen(ws)  # a kill -9: the deferred commits are lost from memory
        assert _survivors(ws2) == dict.fromkeys(NAMES, "whole")
    finally:
        env.close()


@pytest.mark.parametrize("kind", ["crc32", "xxh3"])
def test_a_chunk_changed_under_its_record_is_dropped_whatever_its_fingerprint(
    tmp_path: Path, kind: str
) -> None:
    env, ws = _written(tmp_path)
    try:
        for pack, at, record in _covers(tmp_path, ws):
            if record["path"] not in NAMES:
                continue
            if kind == "crc32":  # the record as a pack written before small41c holds it
                _rewrite(
                    pack,
                    at,
                    {**record, "crc": zlib.crc32(_payload(record["path"]))},
                    _seed(ws),
                    ws.chunks.cover_key,
                )
            if record["path"] == "f1":
                _damage(pack, at, record)
        ws2 = env.crash_and_reopen(ws)
        assert _survivors(ws2) == {"f0": "whole", "f1": "dropped", "f2": "whole"}
    finally:
        env.close()


def test_an_old_crc32_fingerprint_and_a_new_one_both_verify() -> None:
    data = os.urandom(5000)
    for fingerprint in (zlib.crc32(data), chunk_fingerprint(data)):
        assert fingerprint_matches(fingerprint, data, "k")
        assert not fingerprint_matches(fingerprint, data[:-1] + bytes([data[-1] ^ 1]), "k")


def test_a_fingerprint_of_an_unknown_kind_is_an_error_not_a_verdict() -> None:
    with pytest.raises(StorageError, match="chunk k: .*cannot check"):
        fingerprint_matches("z9:00", b"x", "k")
