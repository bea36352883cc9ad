"""A new small file's cover record is encoded once (issue 41, small41): its bytes numbered 0 give
the room reserved in the pack, and the same bytes renumbered (``packs.renumber_cover``: the
number's 16 hex digits and the CRC) are what the pack holds; before, the record was encoded
again for its number. What recovery reads from the pack must not change: the renumbered
bytes equal a fresh encoding, and a crash that loses every deferred commit gets the files back
from them with their cover numbers.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from datahub.writeback import chunks as chunks_module
from datahub.writeback.packs import decode_cover, encode_cover, renumber_cover
from tests.writeback.conftest import CHUNK, make_env, write

RECORD = {"id": 0x2A, "path": 'd/données, "x"\n', "size": 3000, "mtime": 1.25e9 + 0.1, "len": 3000, "crc": 7}


@pytest.mark.parametrize("cover", [1, 0xFF, 1 << 40, (1 << 64) - 1])
def test_a_renumbered_record_is_the_record_encoded_with_its_number(cover: int) -> None:
    renumbered = renumber_cover(encode_cover(0, RECORD), cover)
    assert renumbered == encode_cover(cover, RECORD)
    assert decode_cover(renumbered) == {"c": cover, **RECORD}


def test_a_number_past_the_records_width_is_refused() -> None:
    with pytest.raises(ValueError, match="16 hex digits"):
        renumber_cover(encode_cover(0, RECORD), 1 << 64)


def _payload(path: str) -> bytes:
    return hashlib.sha256(path.encode()).digest() * (3000 // 32)  # one chunk: a covered first close


def test_a_small_files_close_encodes_its_record_once_and_a_crash_replays_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded = []
    real = chunks_module.encode_cover
    monkeypatch.setattr(
        chunks_module,
        "encode_cover",
        lambda cover, record, seed, **kw: encoded.append(cover) or real(cover, record, seed, **kw),
    )
    env = make_env(tmp_path)  # packs: covered first closes
    try:
        ws = env.open()
        ws.journal.defer_seconds = 3600.0  # written into LMDB by nothing but a transaction
        write(ws, "warm", b"w")  # the first create reserves a block of file ids (a transaction)
        encoded.clear()
        for n in range(5):
            write(ws, f"f{n}", _payload(f"f{n}"))
        assert ws.journal.deferred() >= 5  # covered: acknowledged by their packs' records alone
        assert encoded == [0] * 5  # one encoding each (before: [0, cover] each)
        ws2 = env.crash_and_reopen(ws)  # a kill -9: the deferred commits are lost from memory
        for n in range(5):
            with ws2.open(f"f{n}") as fh:
                assert fh.read(0, CHUNK) == _payload(f"f{n}")
    finally:
        env.close()
