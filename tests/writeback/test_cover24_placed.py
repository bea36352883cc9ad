"""cover24: a cover record in a pack verifies only at the place it was written.

Recovery after a crash reads every byte of every pack of its journal for cover records, the
bytes of users' files too. cover22 seeded a record's CRC with its journal's id, so another
journal's record fails it; but a *copy* of this journal's own record (a file whose bytes are a
pack slot of this journal: a chunk and the record after it) still verified, at another pack
and offset. Both records carry the same cover number, and the one listed first was replayed:
from the copy, the acknowledged file's record named the copy's range, which is the member of
the file holding the copy (the same pack, the same offset). Unlinking that file and
collecting its chunk unlinked the pack, and with it the bytes of a file whose close had been
acknowledged. Now a pack's record (``DHWBREC3``) has its CRC seeded with its place too
(``packs.place_seed``: the journal's seed, the pack's token, the record's offset).
"""

from __future__ import annotations

import hashlib
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datahub.writeback.chunks as chunks_module
import datahub.writeback.packs as packs_module
from datahub.writeback import shared_log, workspace_dir
from datahub.writeback.adopt import adopt_journal
from datahub.writeback.journals import JournalPrefix, cover_records
from datahub.writeback.packs import (
    COVER_MAGIC,
    COVER_MAGIC_KEYED,
    COVER_MAGIC_PLACED,
    _decode_covers,
    _file_covers,
    cover_seed,
    decode_cover,
    encode_cover,
    place_seed,
)
from tests.writeback.conftest import CHUNK, UNKEYED, Env, make_env, write
from tests.writeback.test_nodeloss20 import WS, Nodes

PAYLOAD = hashlib.sha256(b"an acknowledged small file").digest() * 90  # 2880 bytes: one chunk


class _Tokens:
    """``secrets`` for ``packs.py``: pack tokens that sort *before* the packs made earlier, so
    the listing that recovery reads (key order) meets a later pack's records first."""

    def __init__(self) -> None:
        self.next = 0xFFFF_FFFF_FFFF_FFFF

    def token_hex(self, nbytes: int) -> str:
        self.next -= 1
        return f"{self.next:016x}"


def _slot(ws, path: str) -> tuple[bytes, bytes]:
    """(chunk, cover record) of the pack slot of ``path``'s first close, as the pack holds them."""
    key, length = ws.journal_record(path)["chunks"]["0"]
    pack, offset = ws.chunks._pack_of(key).path_of(key)
    data = pack.read_bytes()
    body = struct.unpack_from(">I", data, offset + length + 8)[0]
    return data[offset : offset + length], data[offset + length : offset + length + 16 + body]


def _copy(ws, path: str, kind: str) -> bytes:
    """Bytes a user may store in a file of the workspace that hold ``path``'s cover record:
    its whole pack slot (a copy of a pack's bytes), its record after other bytes of the
    chunk's length (a record image left in another slot), or that record as a datahub before
    cover24 encoded it (seeded, unplaced: what this journal's recovery must no longer take for
    a record of an epoch it placed its records in)."""
    chunk, record = _slot(ws, path)
    if kind == "slot":
        return chunk + record
    if kind == "record":
        return bytes(len(chunk)) + record
    found = decode_cover(record, seed=cover_seed(ws.chunks.journal), place=ws.chunks._place(
        ws.journal_record(path)["chunks"]["0"][0], len(chunk)), key=ws.chunks.cover_key)  # fmt: skip
    assert found is not None and found["placed"]
    cover = found.pop("c")
    del found["seeded"], found["placed"], found["keyed"]
    return bytes(len(chunk)) + encode_cover(cover, found, cover_seed(ws.chunks.journal))


def _read(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, CHUNK)


def _copied(ws, kind: str) -> None:
    """``acked`` closed and acknowledged by its cover record alone, then ``copy`` holding a copy
    of that record (``_copy``), in a pack listed before ``acked``'s."""
    ws.journal.defer_seconds = 3600.0  # the closes' commits live in their records only
    write(ws, "warm", b"w")  # the first create reserves a block of file ids (a transaction)
    write(ws, "acked", PAYLOAD)  # acknowledged: its record is durable in its pack
    write(ws, "copy", _copy(ws, "acked", kind))
    objects = [ws.chunks.object_of(ws.journal_record(p)["chunks"]["0"][0]) for p in ("copy", "acked")]
    assert objects == sorted(set(objects))  # two packs, the copy's read first (``_Tokens``)


KINDS = ["slot", "record", "unplaced"]


def _counted(env: Env, journal: str) -> list[dict]:
    """The records `datahub cache journals` counts for the journal (``journal_prefixes``, but
    for this node's journal id, read from its LMDB: open in this process here)."""
    store = env.stores.store(env.config.resolved_shared_url)
    entry = JournalPrefix("ws", journal)
    for info in store.list(entry.prefix):
        entry.add(info)
    return list(cover_records(store, entry))


@pytest.mark.parametrize("kind", KINDS)
def test_a_copy_of_a_record_in_another_pack_is_not_replayed_over_the_real_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setattr(packs_module, "secrets", _Tokens())
    env = make_env(tmp_path, writeback_pack_bytes=CHUNK)  # each small file in a pack of its own
    try:
        ws = env.open()
        _copied(ws, kind)
        if kind != "unplaced":  # `datahub cache journals` counts the records, not their copies
            assert len(_counted(env, ws.chunks.journal)) == 3  # warm, acked, copy (before: 4)
        ws = env.crash_and_reopen(ws)  # a kill: the deferred commits are lost from LMDB
        assert _read(ws, "acked") == PAYLOAD  # before ("record"): dropped, its chunk "torn"
        ws.unlink("copy")
        ws.flusher.gc()  # before ("slot"): unlinked the pack "acked" was replayed into
        assert _read(ws, "acked") == PAYLOAD
        ws.close()
        ws = env.open()
        assert _read(ws, "acked") == PAYLOAD  # before ("slot"): its chunk's pack was gone
        assert sorted(name for name, _ in ws.listdir("")) == ["acked", "warm"]
        ws.close()
    finally:
        env.close()


@pytest.mark.parametrize("kind", KINDS)
def test_an_adopted_journal_takes_its_files_from_their_own_records_not_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Adoption reads the lost journal's records as recovery does; the log's header says its
    session placed them (``cover_placed``), so an unplaced record of that epoch is a copy."""
    monkeypatch.setattr(packs_module, "secrets", _Tokens())
    n = Nodes(tmp_path, {"writeback_pack_bytes": CHUNK})
    try:
        a = n.open_plain("a")
        _copied(a, kind)
        journal = a.chunks.journal
        a.abandon()  # killed, and its disk lost
        shutil.rmtree(workspace_dir(n.config["a"], WS))
        b = n.open("b")
        try:
            report = adopt_journal(b, journal, n.stores["b"])
            assert report.dropped == []  # before ("record", "unplaced"): ["acked"], its chunk "torn"
            assert sorted(report.files) == ["acked", "copy", "warm"]
            assert _read(b, "acked") == PAYLOAD
        finally:
            b.close()
    finally:
        n.close()


def _as_before_cover24(monkeypatch: pytest.MonkeyPatch) -> None:
    """Write pack records and the shared log's header as a datahub before cover24 did:
    unplaced (``DHWBREC2``), no ``cover_placed``."""
    monkeypatch.setattr(chunks_module.ChunkStore, "_place", lambda self, key, length: None)
    monkeypatch.setattr(chunks_module.ChunkStore, "cover_key", UNKEYED)  # wbgaps25 came after
    real = shared_log.SharedLog.__init__
    later = ("cover_placed", "cover_keyed", "cover_key")

    def old_header(self, chunks, epoch, journal, header: dict) -> None:
        real(self, chunks, epoch, journal, {k: v for k, v in header.items() if k not in later})

    monkeypatch.setattr(shared_log.SharedLog, "__init__", old_header)


def test_a_journal_from_before_cover24_still_replays_its_unplaced_records(
    packs_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as old:
        _as_before_cover24(old)
        ws = packs_env.open()
        with ws.journal.write("as before cover24") as txn:
            for name in ("cover_placed", "cover_keyed", "cover_key"):
                txn.del_meta(name)
        ws.journal.defer_seconds = 3600.0
        write(ws, "warm", b"w")
        write(ws, "old", PAYLOAD)
        assert _slot(ws, "old")[1].startswith(COVER_MAGIC)
        ws.abandon()
    ws = packs_env.open()
    assert _read(ws, "old") == PAYLOAD  # replayed from its unplaced record
    with ws.journal.read() as txn:
        assert int(txn.meta("cover_placed")) == int(txn.meta("cover_epoch"))
    write(ws, "new", PAYLOAD)
    assert _slot(ws, "new")[1].startswith(COVER_MAGIC_KEYED)  # placed, and keyed since wbgaps25
    ws.close()


def test_a_session_of_a_datahub_before_cover24_after_one_since_still_replays(
    packs_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A downgrade: the journal's ``cover_placed`` names an earlier session; the last one wrote
    unplaced records (it knows no ``cover_placed``), and they are its acknowledged files."""
    packs_env.open().close()  # a session since cover24: ``cover_placed`` is its epoch
    with monkeypatch.context() as old:
        _as_before_cover24(old)
        ws = packs_env.open()
        with ws.journal.write("as before cover24: the meta is left as it was") as txn:
            txn.put_meta("cover_placed", str(int(txn.meta("cover_epoch")) - 1))
            txn.put_meta("cover_keyed", str(int(txn.meta("cover_epoch")) - 1))
        ws.journal.defer_seconds = 3600.0
        write(ws, "warm", b"w")
        write(ws, "old", PAYLOAD)
        ws.abandon()
    ws = packs_env.open()
    assert _read(ws, "old") == PAYLOAD
    ws.close()


def test_a_journal_from_before_cover24_is_adopted_with_its_unplaced_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = Nodes(tmp_path, {})
    try:
        with monkeypatch.context() as old:
            _as_before_cover24(old)
            a = n.open_plain("a")
            a.journal.defer_seconds = 3600.0
            write(a, "warm", b"w")
            write(a, "old", PAYLOAD)
            journal = a.chunks.journal
            a.abandon()
        shutil.rmtree(workspace_dir(n.config["a"], WS))
        b = n.open("b")
        try:
            report = adopt_journal(b, journal, n.stores["b"])
            assert report.covers == 2 and sorted(report.files) == ["old", "warm"]
            assert _read(b, "old") == PAYLOAD
        finally:
            b.close()
    finally:
        n.close()


# --- the format ------------------------------------------------------------------------------

_tokens = st.text("0123456789abcdef", min_size=16, max_size=16)
_offsets = st.integers(0, 2**32 - 1)
_records = st.fixed_dictionaries(
    {"id": st.integers(1, 2**40), "path": st.text(max_size=20), "size": st.integers(0, 2**20),
     "mtime": st.floats(0, 2e9), "len": st.integers(0, 2**20), "crc": st.integers(0, 2**32 - 1)}
)  # fmt: skip
SEED = cover_seed("ours")


@settings(max_examples=200, deadline=None)
@given(_records, st.integers(0, 2**64 - 1), _tokens, _offsets, _tokens, _offsets)
def test_a_placed_record_verifies_at_its_own_pack_and_offset_only(
    record: dict, cover: int, token: str, offset: int, other_token: str, other_offset: int
) -> None:
    data = encode_cover(cover, record, SEED, (token, offset))
    assert data.startswith(COVER_MAGIC_PLACED)
    assert decode_cover(data, seed=SEED, place=(token, offset)) == {
        "c": cover, **record, "seeded": True, "placed": True
    }  # fmt: skip
    assert decode_cover(data, seed=SEED) is None  # read from no pack (a RADOS or S3 object's)
    assert decode_cover(data, seed=cover_seed("theirs"), place=(token, offset)) is None
    if (other_token, other_offset) != (token, offset):
        assert decode_cover(data, seed=SEED, place=(other_token, other_offset)) is None
    # renumbered from its unplaced template (a close's path: ``ChunkStore.renumber_cover``)
    assert packs_module.renumber_cover(encode_cover(0, record, SEED), cover, SEED, (token, offset)) == data


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(st.binary(max_size=64), st.just(b"placed"), st.just(COVER_MAGIC_PLACED)), max_size=12),
    _tokens,
    st.integers(1, 300),
)
def test_a_pack_read_in_pieces_finds_each_placed_record_where_it_was_written(
    tmp_path_factory, parts: list[bytes], token: str, piece: int
) -> None:
    """Placed records at their offsets among other bytes (chunks; the magic alone; copies of a
    record written elsewhere): found there, and only there, whole or in ``piece``-byte reads."""
    data, wanted = b"", []
    for n, part in enumerate(parts):
        if part == b"placed":
            record = {"id": n + 1, "path": f"p{n}", "len": 0}
            part = encode_cover(n, record, SEED, (token, len(data)))
            wanted.append(len(data))
            data += part + part  # and a verbatim copy right after: not at its place
        else:
            data += part
    path = tmp_path_factory.mktemp("pack") / token
    path.write_bytes(data)
    with open(path, "rb", buffering=0) as fh:
        found = list(_file_covers(fh.fileno(), piece, seed=SEED, token=token))
    assert [at for at, _ in found] == wanted
    assert found == list(_decode_covers(data, seed=SEED, token=token))
    assert all(record["placed"] for _, record in found)


def test_a_place_seed_differs_for_every_offset_of_a_pack() -> None:
    """Offsets below 2**32 apart differ within 32 bits: a CRC-32 tells them apart, always."""
    seeds = {place_seed(SEED, "00112233445566ff", offset) for offset in range(0, 1 << 16)}
    assert len(seeds) == 1 << 16
