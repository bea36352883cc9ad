"""review22a: a cover record that the journal never wrote is not replayed.

Recovery after an unclean close reads every byte of every pack for cover records
(``packs._file_covers``), the bytes of users' files too. A file whose bytes hold a record (a
copy of a datahub pack file; here one made by ``encode_cover``) was replayed as a new file
of the record's id and path. With an id the journal had not handed out yet, the next new file
given that id found the phantom's record: its close was acknowledged, its name was never
written, and its bytes read under the phantom's name (an acknowledged file lost). Now a record
is replayed only if its file id was reserved by this journal and its cover number is of an
epoch this journal began (``records.cover_is_ours``).
"""

from __future__ import annotations

import logging
import zlib

import pytest

from datahub.errors import NotFound
from datahub.writeback.model import ID_BLOCK
from datahub.writeback.packs import encode_cover
from tests.writeback.conftest import Env, write


def _read(ws, path: str) -> bytes:
    with ws.open(path) as fh:
        return fh.read(0, 1 << 20)


def _holding_a_record(file_id: int, cover: int, path: str = "phantom") -> bytes:
    """Bytes a user may store: some data, then a whole cover record naming it (as a pack holds)."""
    payload = b"bytes of a pack file copied into a workspace " * 8
    record = {"id": file_id, "path": path, "size": len(payload), "mtime": 1.0, "len": len(payload)}
    record["crc"] = zlib.crc32(payload)
    return payload + encode_cover(cover, record)


def test_a_record_of_an_id_not_handed_out_yet_takes_no_later_file(
    packs_env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    ws = packs_env.open()
    write(ws, "first", b"reserves this session's block of ids")
    with ws.journal.read() as txn:  # the next id to be handed out, and this session's epoch
        next_id, epoch = int(txn.meta("next_id")), int(txn.meta("cover_epoch"))
    write(ws, "user-data.bin", _holding_a_record(next_id, (epoch << 32) + 10**6))
    ws.abandon()  # a crash: the next open replays the records above ``covered``
    with caplog.at_level(logging.WARNING, logger="datahub.writeback"):
        ws = packs_env.open()
    write(ws, "victim", b"an acknowledged file")  # gets the id the record named
    assert _read(ws, "victim") == b"an acknowledged file"  # before: not found (no name written)
    with pytest.raises(NotFound):
        ws.stat("phantom")  # before: the victim's bytes, under the record's path
    assert any("never wrote" in r.getMessage() and "'phantom'" in r.getMessage() for r in caplog.records)
    ws.close()
    ws = packs_env.open()
    assert sorted(name for name, _ in ws.listdir("")) == ["first", "user-data.bin", "victim"]
    assert _read(ws, "victim") == b"an acknowledged file"


def test_a_record_of_a_later_epoch_is_not_replayed(packs_env: Env) -> None:
    ws = packs_env.open()
    write(ws, "gone", b"its id is free once unlinked")
    ws.unlink("gone")
    with ws.journal.read() as txn:
        free = next(i for i in range(1, ID_BLOCK) if txn.file(i) is None)
    write(ws, "user-data.bin", _holding_a_record(free, 1 << 62))  # an epoch this journal never began
    ws.abandon()
    ws = packs_env.open()
    with pytest.raises(NotFound):
        ws.stat("phantom")
    assert _read(ws, "user-data.bin")[-8:] == _holding_a_record(free, 1 << 62)[-8:]
