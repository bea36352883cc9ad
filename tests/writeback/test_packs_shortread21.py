"""The replay's pieces survive short reads (review21a): ``_file_covers`` read each piece with
one ``pread``, where the whole-pack read it replaced read to the end; a ``pread`` that
returned less (a network or FUSE-backed local shared tier may) skipped the rest of that piece,
and with it any cover record there: a file acknowledged by its record lost at replay."""

from __future__ import annotations

import os

from datahub.writeback.packs import Packs, encode_cover

PREFIX = "writeback/ws/j-1"


def test_cover_records_are_all_found_when_every_read_comes_back_short(tmp_path, monkeypatch) -> None:
    packs = Packs(tmp_path, PREFIX, 1 << 30)
    wanted = []
    for f in range(12):
        record = encode_cover(f, {"id": f, "len": 3_000, "path": f"p{f}"})
        key = packs.reserve(f, 0, 3_000, len(record))
        packs.write(key, os.urandom(3_000), record)
        wanted.append(key)
    real = os.pread

    def short_pread(fd: int, n: int, offset: int) -> bytes:
        return real(fd, min(n, 1_000), offset)  # never more than 1,000 bytes a call

    monkeypatch.setattr(os, "pread", short_pread)
    try:
        found = [key for key, _ in packs.cover_records(packs.object_of(wanted[0]))]
    finally:
        monkeypatch.undo()
        packs.close()
    assert found == wanted
