"""cover22: a cover record verifies only for the journal that wrote it.

Recovery reads every byte of every pack, users' files included. review22a's check (the id
was handed out here, the epoch was begun here) still took a copy of a record of this epoch
and a freed id: "phantom" was replayed over a user's file "copy", and unlinking it and
collecting unlinked the pack under "copy". Now a record's CRC is seeded by its journal's id
(``packs.cover_seed``), and an unseeded record (from before cover22) is accepted only of an
epoch the journal began before it seeded its records (``records.seeded_from``).
"""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datahub.writeback.chunks as chunks_module
from datahub.errors import NotFound
from datahub.writeback.packs import _decode_covers, cover_seed, encode_cover
from tests.writeback.conftest import UNKEYED, Env, write
from tests.writeback.test_review22a_records import _read

PAYLOAD = b"bytes of another workspace's pack, copied into this one " * 8


def _record(file_id: int, path: str) -> dict:
    return {"id": file_id, "path": path, "size": len(PAYLOAD), "mtime": 1.0, "len": len(PAYLOAD),
            "crc": zlib.crc32(PAYLOAD)}  # fmt: skip


@pytest.mark.parametrize("seed", [None, cover_seed("another-journal")], ids=["unseeded", "foreign"])
def test_a_copied_record_of_a_freed_id_is_not_replayed(packs_env: Env, seed: int | None) -> None:
    ws = packs_env.open()
    write(ws, "gone", b"frees its id once unlinked")
    with ws.journal.read() as txn:
        epoch, gone = int(txn.meta("cover_epoch")), txn.entry("gone")["id"]
    ws.unlink("gone")
    write(ws, "copy", PAYLOAD + encode_cover((epoch << 32) + 10**6, _record(gone, "phantom"), seed))
    ws.abandon()
    ws = packs_env.open()
    with pytest.raises(NotFound):  # on main (unseeded): replayed as a file of its own
        ws.unlink("phantom")
    ws.flusher.gc()
    ws.close()
    ws = packs_env.open()
    assert _read(ws, "copy").startswith(PAYLOAD)  # on main: its pack was unlinked
    ws.close()


def test_a_journal_from_before_cover22_still_replays_its_unseeded_records(
    packs_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as old:  # write as the code before cover22 did
        old.setattr(chunks_module, "cover_seed", lambda journal: None)
        old.setattr(chunks_module.ChunkStore, "_place", lambda self, key, length: None)  # cover24 came after
        old.setattr(chunks_module.ChunkStore, "cover_key", UNKEYED)  # and wbgaps25
        ws = packs_env.open()
        with ws.journal.write("as before cover22") as txn:
            for name in ("cover_seeded", "cover_placed", "cover_keyed", "cover_key"):
                txn.del_meta(name)
        ws.journal.defer_seconds = 3600.0  # the close's commit stays in its record only
        write(ws, "old", PAYLOAD)
        ws.abandon()
    ws = packs_env.open()
    assert _read(ws, "old") == PAYLOAD  # replayed from its unseeded record
    with ws.journal.read() as txn:
        assert int(txn.meta("cover_seeded")) == int(txn.meta("cover_epoch"))
        assert int(txn.meta("cover_placed")) == int(txn.meta("cover_epoch"))
        assert int(txn.meta("cover_keyed")) == int(txn.meta("cover_epoch"))
    ws.close()


_foreign = st.builds(
    lambda c, i, s: encode_cover(c, {"id": i, "path": "p", "len": 1}, s),
    st.integers(0, 2**40),
    st.integers(0, 2**20),
    st.one_of(st.none(), st.integers(0, 2**32 - 1).filter(lambda s: s != cover_seed("ours"))),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=64), _foreign, st.just(b"DHWBREC2")), max_size=12))
def test_random_bytes_and_foreign_records_never_verify_as_this_journals(parts: list[bytes]) -> None:
    for _at, record in _decode_covers(b"".join(parts), seed=cover_seed("ours")):
        assert not record.get("seeded")  # only unseeded ones, judged by their epoch
