"""recover19 (issues 38/41): opening a workspace reads its file records a batch at a time.

Before, recovery (``_recover``, run by every open) decoded every file record in one list and
held a dict of every path per file id: 2.2 GiB of RSS to open a workspace of 10^6 files
(docs/benchmarks.md, "recover19"). Now it keeps a bitmap of the file ids the namespace names
and reads the records ``_RECOVER_BATCH`` at a time, in id order, each batch from a cursor of
its own. These tests shrink the batch to 4 so that every rule of recovery runs across
batches: records without a name deleted, unacked and torn files dropped name and all, the
rest kept, verified and counted in ``used``. Real local stores and journals.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator

import pytest

import datahub.writeback as writeback
from datahub.writeback import flusher as flusher_mod
from datahub.writeback.journal import Txn
from datahub.writeback.model import new_record
from tests.writeback.conftest import CHUNK, Env, assert_holds_exactly, write

BATCH = 4


class _Scans:
    """The most file records one scan of the open read, and whether a whole scan ran."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.most = 0
        self.batches = 0
        self.whole = 0
        real_after, real_files = Txn.files_after, Txn.files

        def files_after(txn: Txn, after: int | None) -> Iterator[tuple[int, dict]]:
            read = 0
            try:
                for item in real_after(txn, after):
                    read += 1
                    yield item
            finally:
                self.most = max(self.most, read)
                self.batches += 1

        def files(txn: Txn) -> Iterator[tuple[int, dict]]:
            self.whole += 1
            return real_files(txn)

        monkeypatch.setattr(Txn, "files_after", files_after)
        monkeypatch.setattr(Txn, "files", files)


def test_an_open_reads_the_records_a_batch_at_a_time_and_keeps_every_rule(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """18 files, one left unacked by a crash, one whose first close is made torn, one record
    no name refers to: reopened with batches of 4, no scan read more than 4 records (before:
    one scan read all 21), and the outcome is recovery's: the two dropped name and all, the
    nameless record deleted, the 16 others whole and counted in ``used``."""
    monkeypatch.setattr(writeback, "_RECOVER_BATCH", BATCH)
    ws = env.open(background=False)
    ws.mkdir("d")
    files = {f"d/f{i:02d}": os.urandom(CHUNK // 3 + i) for i in range(18)}
    for path, data in files.items():
        write(ws, path, data)
    torn = "d/f07"
    with ws.journal.write("test: a torn first close") as txn:
        file_id = txn.entry(torn)["id"]
        rec = txn.file(file_id)
        key, n = next(iter(rec["chunks"].values()))
        rec["unverified"] = {key: [n, zlib.crc32(files[torn]) ^ 1]}  # bytes other than those written
        txn.put_file(file_id, rec)
        nameless = max(i for i, _ in txn.files()) + 1000
        txn.put_file(nameless, new_record(0.0))  # a record no name refers to: deleted
    stream = ws.open("d/stream", create=True)
    stream.write(0, b"never acknowledged")
    ws.mkdir("e")  # journals d/stream empty and unacked
    assert ws.journal_record("d/stream")["unacked"]

    scans = _Scans(monkeypatch)
    ws2 = env.crash_and_reopen(ws, background=False)
    assert scans.whole == 0 and 0 < scans.most <= BATCH, (scans.whole, scans.most)
    assert scans.batches >= 21 // BATCH

    kept = {p: d for p, d in files.items() if p != torn}
    assert_holds_exactly(ws2, kept)
    with ws2.journal.read() as txn:
        assert txn.file(nameless) is None
        assert not [rec for _, rec in txn.files() if rec.get("unverified") or rec.get("unacked")]
        assert len(list(txn.files())) == len(kept)
    report = ws2.flush()
    assert (report.uploaded, report.still_dirty, report.errors) == (len(kept), 0, [])


def test_asking_whether_anything_is_dirty_reads_one_batch(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """30 dirty files and 3 pending deletes, batches of 4: ``dirty(limit=1)`` reads at most one
    batch of records (before: ``dirty()`` read all 30 and listed every path), and names a
    path ``dirty()`` lists; ``dirty_count()`` counts what ``dirty()`` lists."""
    monkeypatch.setattr(flusher_mod, "_PLAN_BATCH", BATCH)
    monkeypatch.setattr(flusher_mod, "_SCAN_BATCH", BATCH)
    ws = env.open(background=False)
    for i in range(3):
        write(ws, f"gone{i}", b"flushed, then unlinked")
    ws.flush()
    for i in range(3):
        ws.unlink(f"gone{i}")
    for i in range(30):
        write(ws, f"f{i:02d}", f"file {i}".encode())
    everything = ws.dirty()
    assert len(everything) == 33
    reads = 0
    real_file = Txn.file

    def file(txn: Txn, file_id: int):
        nonlocal reads
        reads += 1
        return real_file(txn, file_id)

    monkeypatch.setattr(Txn, "file", file)
    first = ws.dirty(limit=1)
    assert len(first) == 1 and first[0] in everything and 0 < reads <= BATCH, (first, reads)
    assert ws.dirty_count() == 33
    assert sorted(ws.dirty(limit=40)) == everything
    ws.flush()
    assert ws.dirty(limit=1) == [] and ws.dirty_count() == 0
