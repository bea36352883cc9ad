"""wbgaps25: a user's file bytes cannot forge a cover record that recovery replays.

Recovery (and adoption) read every byte of a journal's packs for cover records, users' file
bytes included. A pack's record (``DHWBREC3``, cover24) carried a CRC-32 seeded with
``place_seed(cover_seed(journal), token, offset)``: the journal's id is no secret (it names the
flush folder, ``<target>/j-<id>``, and the shared-tier prefix), nor are a pack's token and the
offset its next member lands at to anyone who has seen a pack member's key (recovery's log
lines name them). So a user who wrote a file holding a record computed for the place it would
land at made recovery replay it: a file never written appeared, and an acknowledged file whose
id the forged record took was lost. Since wbgaps25 a pack's record carries a MAC keyed with a
per-journal secret (``DHWBREC4``, ``packs.cover_mac``), which no workspace user can read.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from datahub.writeback import workspace_dir
from datahub.writeback.adopt import adopt_journal
from datahub.writeback.chunks import chunk_fingerprint
from datahub.writeback.journals import JournalPrefix, cover_records
from datahub.writeback.packs import (
    COVER_MAGIC_KEYED,
    COVER_MAGIC_PLACED,
    cover_seed,
    decode_cover,
    encode_cover,
    renumber_cover,
)
from tests.writeback.conftest import CHUNK, Env, write
from tests.writeback.test_nodeloss20 import WS, Nodes

ACKED = hashlib.sha256(b"an acknowledged small file").digest() * 90  # 2880 bytes: one chunk
PLANTED = b"never written by anyone: " + bytes(200)


def _id(ws, path: str) -> int:
    """A file's id (the mount's inode number: ids are handed out in order, so a user sees the
    next one coming)."""
    with ws.journal.read() as txn:
        return ws.overlay.entry(txn, path)["id"]


def _forge(ws) -> bytes:
    """What a user who knows the journal id and where the next pack member lands (token and
    offset) writes: ``PLANTED``, then a record (``DHWBREC3``: all a user can compute) naming
    those bytes as the first close of ``planted``, with the file id the next new file gets and
    the lowest cover number of this session, so it is replayed before that file's own record."""
    journal = ws.chunks.journal
    pack = ws.chunks._packs._current  # the pack the next small close appends to
    at = pack.size + len(PLANTED)  # the forged record's offset in it
    with ws.journal.read() as txn:
        epoch = int(txn.meta("cover_epoch"))
    victim = _id(ws, "evil-warm") + 2  # "evil" takes the next id, "acked" the one after
    record = {
        "id": victim, "path": "planted", "size": len(PLANTED), "mtime": 1.0,
        "len": len(PLANTED), "crc": chunk_fingerprint(PLANTED),
    }  # fmt: skip
    forged = encode_cover((epoch << 32) | 1, record, cover_seed(journal), place=(pack.token, at))
    found = decode_cover(forged, seed=cover_seed(journal), place=(pack.token, at))
    assert found is not None and found["placed"]  # it verifies where it will lie, as cover24 checked
    return PLANTED + forged


def _planted(ws) -> None:
    """``evil`` holding a forged record, then ``acked`` closed and acknowledged by its own cover
    record alone (its commit deferred: a kill loses it from LMDB)."""
    ws.journal.defer_seconds = 3600.0
    write(ws, "evil-warm", b"w")  # the first create reserves a block of file ids; a pack is open
    write(ws, "evil", _forge(ws))
    write(ws, "acked", ACKED)
    assert _id(ws, "acked") == _id(ws, "evil-warm") + 2  # the id the forged record names


def _read(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, CHUNK)


def test_a_forged_record_in_a_users_file_is_not_replayed(packs_env: Env) -> None:
    ws = packs_env.open()
    _planted(ws)
    ws = packs_env.crash_and_reopen(ws)  # a kill: the deferred commits are lost from LMDB
    names = sorted(name for name, _ in ws.listdir(""))
    assert names == ["acked", "evil", "evil-warm"]  # before: "planted" instead of "acked"
    assert _read(ws, "acked") == ACKED  # before: lost (the forged record took its file id)
    ws.close()


def test_an_adoption_does_not_replay_a_forged_record(tmp_path: Path) -> None:
    """Adoption reads the lost journal's packs as recovery does; the log's header holds its key."""
    n = Nodes(tmp_path, {})
    try:
        a = n.open_plain("a")
        _planted(a)
        journal = a.chunks.journal
        a.abandon()  # killed, and its disk lost
        shutil.rmtree(workspace_dir(n.config["a"], WS))
        b = n.open("b")
        try:
            report = adopt_journal(b, journal, n.stores["b"])
            assert sorted(report.files) == ["acked", "evil", "evil-warm"]  # before: "planted", no "acked"
            assert _read(b, "acked") == ACKED
        finally:
            b.close()
    finally:
        n.close()


def test_pack_records_are_keyed_and_counted(packs_env: Env) -> None:
    """Every new pack record is ``DHWBREC4``; `datahub cache journals` counts them with the key
    its log's header holds (a forged one not among them)."""
    ws = packs_env.open()
    _planted(ws)
    key, length = ws.journal_record("evil-warm")["chunks"]["0"]
    pack, offset = ws.chunks._pack_of(key).path_of(key)
    assert pack.read_bytes()[offset + length :].startswith(COVER_MAGIC_KEYED)
    store = packs_env.stores.store(packs_env.config.resolved_shared_url)
    entry = JournalPrefix("ws", ws.chunks.journal)
    for info in store.list(entry.prefix):
        entry.add(info)
    assert sorted(r["path"] for r in cover_records(store, entry)) == ["acked", "evil", "evil-warm"]
    ws.close()


def test_the_key_is_made_once_and_kept(packs_env: Env) -> None:
    ws = packs_env.open()
    key = ws.chunks.cover_key
    assert key is not None and len(key) == 32
    ws.close()
    ws = packs_env.open()
    assert ws.chunks.cover_key == key
    ws.close()


def _as_before_wbgaps25(ws) -> None:
    """This session writes as a datahub before wbgaps25 did: unkeyed (``DHWBREC3``) records,
    and its recovery wrote no ``cover_keyed`` for its epoch (a downgrade: the meta an earlier,
    newer session left stays as it was)."""
    ws.chunks.cover_key = None
    with ws.journal.write("as before wbgaps25") as txn:
        epoch = int(txn.meta("cover_epoch"))
        if epoch > 1:
            txn.put_meta("cover_keyed", str(epoch - 1))
        else:
            txn.del_meta("cover_keyed")
            txn.del_meta("cover_key")


@pytest.mark.parametrize("before", ["a journal from before", "a downgrade"])
def test_unkeyed_records_of_a_session_before_wbgaps25_still_replay(packs_env: Env, before: str) -> None:
    if before == "a downgrade":
        packs_env.open().close()  # a session since wbgaps25: ``cover_keyed`` is its epoch
    ws = packs_env.open()
    _as_before_wbgaps25(ws)
    ws.journal.defer_seconds = 3600.0
    write(ws, "warm", b"w")
    write(ws, "old", ACKED)
    key, length = ws.journal_record("old")["chunks"]["0"]
    pack, offset = ws.chunks._pack_of(key).path_of(key)
    assert pack.read_bytes()[offset + length :].startswith(COVER_MAGIC_PLACED)
    ws.abandon()
    ws = packs_env.open()
    assert _read(ws, "old") == ACKED  # replayed from its unkeyed record
    write(ws, "new", ACKED)
    key, length = ws.journal_record("new")["chunks"]["0"]
    pack, offset = ws.chunks._pack_of(key).path_of(key)
    assert pack.read_bytes()[offset + length :].startswith(COVER_MAGIC_KEYED)
    ws.close()


def test_a_keyed_record_verifies_only_with_its_key_at_its_place() -> None:
    """The format: ``renumber_cover`` of a keyed template is ``encode_cover`` placed; it verifies
    with its journal's seed and key at its place, and nowhere else, nor with any other key."""
    seed, key, place = cover_seed("0123456789abcdef"), bytes(range(32)), ("89abcdef01234567", 4096)
    record = {"id": 7, "path": "p", "size": 3, "mtime": 1.0, "len": 3, "crc": "x3:0000000000000000"}
    template = encode_cover(0, record, seed, key=key)
    assert template.startswith(COVER_MAGIC_KEYED)
    placed = renumber_cover(template, 5, seed, place, key)
    assert placed == encode_cover(5, record, seed, place, key)
    assert len(placed) == len(template)  # the room reserved for it holds it
    found = decode_cover(placed, seed=seed, place=place, key=key)
    assert found is not None and found["c"] == 5 and found["keyed"] and found["placed"]
    assert decode_cover(template, seed=seed, place=place, key=key) is None  # unnumbered: MAC zeros
    assert decode_cover(placed, seed=seed, place=place) is None  # no key
    assert decode_cover(placed, seed=seed, place=place, key=bytes(32)) is None  # another key
    assert decode_cover(placed, seed=seed, place=(place[0], place[1] + 1), key=key) is None
    assert decode_cover(placed, seed=cover_seed("fedcba9876543210"), place=place, key=key) is None
    tampered = bytearray(placed)
    tampered[-1] ^= 1
    assert decode_cover(bytes(tampered), seed=seed, place=place, key=key) is None
