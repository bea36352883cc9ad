"""recover20 (issues 38/41): an open's recovery and the garbage collector work in batches.

An open rewrote every unverified record (a fresh workspace's every file, until its flush) in
one LMDB write transaction, whose dirty pages it held until the commit: 450 MiB at 10^6
files; and the collector read the whole garbage list into one set (docs/benchmarks.md,
"recover20"). Now recovery's replay of cover records, its judgement of the records and its
drops commit ``_RECOVER_BATCH`` files a transaction, and the collector reads the list
``_GC_BATCH`` keys a read transaction and takes what it deleted off in a write transaction
per batch. Here the batches are 4, so that every rule runs across batches; and a recovery
stopped between two of its commits leaves a journal the next open recovers the same way.
Real local stores and journals.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

import datahub.writeback as writeback
from datahub.errors import StorageError
from datahub.writeback import flusher as flusher_mod
from datahub.writeback.journal import Txn
from datahub.writeback.model import new_record
from tests.writeback.conftest import (
    CHUNK,
    Env,
    assert_holds_exactly,
    journal_writes_failing_at,
    make_env,
    objects_of,
    write,
)

BATCH = 4
NEVER = 3600.0  # the journal's committer never writes deferred commits on its clock


def _payload(path: str) -> bytes:
    return hashlib.sha256(path.encode()).digest() * (3000 // 32)  # one chunk: a covered first close


class _Puts:
    """Keys each LMDB write transaction was given (puts and deletes through ``Txn``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.per_txn: dict[object, int] = {}  # the lmdb transaction (kept alive: no id reuse)
        real = Txn._put

        def put(txn: Txn, db: str, key: bytes, value: bytes | None) -> None:
            if txn._record is None:
                self.per_txn[txn._txn] = self.per_txn.get(txn._txn, 0) + 1
            real(txn, db, key, value)

        monkeypatch.setattr(Txn, "_put", put)


@pytest.fixture
def packed(tmp_path) -> Iterator[Env]:
    """Small files in packs: their first closes carry cover records (the replay's input)."""
    e = make_env(tmp_path)
    yield e
    e.close()


def _crashed_workspace(env: Env) -> tuple[dict[str, bytes], int]:
    """10 files in LMDB (unverified: never flushed), 10 whose first closes a kill lost from the
    journal (their packs' cover records hold them), one nameless record; what an open finds."""
    ws = env.open(background=False)
    ws.journal.defer_seconds = NEVER
    ws.mkdir("d")
    files = {f"d/f{i:02d}": _payload(f"d/f{i:02d}") for i in range(20)}
    for path in list(files)[:10]:
        write(ws, path, files[path])
    ws.journal.settle_deferred()
    with ws.journal.write("test: a record no name refers to") as txn:
        nameless = max(i for i, _ in txn.files()) + 1000
        txn.put_file(nameless, new_record(0.0))
    for path in list(files)[10:]:
        write(ws, path, files[path])
    assert ws.journal.deferred() == 10
    ws.abandon()  # a kill -9: the deferred ten are only in their packs
    return files, nameless


def test_an_open_commits_its_replay_and_its_judgement_a_batch_at_a_time(
    packed: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With batches of 4, no transaction of the open writes more than 2 keys per file of a
    batch (a replayed file: its record and its name), though it replays 10 files, clears 20
    records' flags and deletes a nameless one (before: one transaction wrote all 42 keys);
    and the outcome is recovery's: the 20 files whole, verified, counted in ``used``."""
    files, nameless = _crashed_workspace(packed)
    monkeypatch.setattr(writeback, "_RECOVER_BATCH", BATCH)
    puts = _Puts(monkeypatch)
    ws = packed.open(background=False)
    assert sum(puts.per_txn.values()) >= 10 * 2 + 20 + 1
    assert max(puts.per_txn.values()) <= 2 * BATCH, sorted(puts.per_txn.values())

    assert_holds_exactly(ws, files)
    with ws.journal.read() as txn:
        assert txn.file(nameless) is None
        assert not [rec for _, rec in txn.files() if rec.get("unverified") or rec.get("unacked")]


def test_a_recovery_stopped_between_its_commits_is_finished_by_the_next_open(
    packed: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of recovery's commits stands alone: an open whose 2nd, 4th, 6th or 8th
    transaction fails (a kill between two commits, for what reaches the journal) leaves a
    journal the next open recovers to the same 20 whole files, none lost, none twice."""
    files, _ = _crashed_workspace(packed)
    monkeypatch.setattr(writeback, "_RECOVER_BATCH", BATCH)
    for stop_at in (2, 4, 6, 8):
        with (
            journal_writes_failing_at(monkeypatch, stop_at),
            pytest.raises(StorageError, match="test: recovery stopped"),
        ):
            packed.open(background=False)
    ws = packed.open(background=False)
    assert_holds_exactly(ws, files)
    report = ws.flush()
    assert (report.uploaded, report.still_dirty, report.errors) == (len(files), 0, [])


def test_the_collector_reads_the_garbage_list_a_batch_at_a_time(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """13 chunks of unlinked files and 3 of a file held open on the list, batches of 4: no read
    of the list returns more than 4 keys and none reads it whole (before: one set of all 16),
    no write takes more than 4 deleted keys off, the 13 go (objects and list entries); the
    open file's 3 stay in their objects until it closes, then the next collection takes them."""
    monkeypatch.setattr(flusher_mod, "_GC_BATCH", BATCH, raising=False)  # absent before recover20
    monkeypatch.setattr(flusher_mod, "_UNLIST", 2)
    ws = env.open(background=False)
    for i in range(13):
        write(ws, f"f{i:02d}", _payload(f"f{i:02d}"))
    with ws.journal.read() as txn:
        unlinked = [k for _, rec in txn.files() for k, _ in rec["chunks"].values()]
    for i in range(13):
        ws.unlink(f"f{i:02d}")
    held = ws.open("held", create=True)
    old: list[str] = []
    for generation in range(4):
        held.write(0, _payload(f"held {generation}"))
        held.fsync()
        old += [k for k, _ in ws.journal_record("held")["chunks"].values()]
    old = old[:-1]  # the last generation's chunk is referenced
    with ws.journal.read() as txn:
        assert sorted(txn.garbage()) == sorted(unlinked + old)

    reads: list[int] = []
    whole = 0
    real_after, real_garbage = getattr(Txn, "garbage_after", None), Txn.garbage

    def garbage_after(txn: Txn, after: str | None) -> Iterator[str]:
        n = 0
        try:
            for key in real_after(txn, after):
                n += 1
                yield key
        finally:
            reads.append(n)

    def garbage(txn: Txn) -> list[str]:
        nonlocal whole
        whole += 1
        return real_garbage(txn)

    monkeypatch.setattr(Txn, "garbage_after", garbage_after, raising=False)
    monkeypatch.setattr(Txn, "garbage", garbage)
    puts = _Puts(monkeypatch)
    assert ws.flusher.gc() == 13
    monkeypatch.setattr(Txn, "garbage", real_garbage)
    assert whole == 0 and reads and max(reads) <= BATCH and len(reads) >= 16 // BATCH, (whole, reads)
    assert max(puts.per_txn.values()) <= BATCH, sorted(puts.per_txn.values())
    shared = set(env.shared_keys())
    assert not objects_of(ws, unlinked) & (shared - objects_of(ws, old))
    assert objects_of(ws, old) <= shared  # the open file's garbage is kept
    with ws.journal.read() as txn:
        assert txn.garbage() == []  # off the list (``_UNLIST`` 2), kept in memory

    held.close()
    assert ws.flusher.gc() == len(old)
    with ws.journal.read() as txn:
        assert txn.garbage() == []
    live = objects_of(ws, [k for k, _ in ws.journal_record("held")["chunks"].values()])
    assert not objects_of(ws, old) & (set(env.shared_keys()) - live)
    with ws.open("held") as fh:
        assert fh.read(0, CHUNK) == _payload("held 3")[:CHUNK]
