"""review20d: recover20's batched recovery attacked with two crashes in a row.

recover20 commits an open's recovery ``_RECOVER_BATCH`` files a transaction: the replay of
cover records, the epoch, the judgement, the drops (then the collector's batches). Here a
crashed workspace holding every kind of record recovery judges (unverified ones in LMDB,
covered first closes only in their packs, a nameless record, an unacked created file, a
torn first close) is opened with a failure injected at its N-th journal write transaction
(a kill between two commits, for what reaches the journal), then opened again with a failure
at the M-th (every N; every third M, shifted with N, so that every M is met), and then
opened whole: every acknowledged file is there
with its bytes, and nothing unacknowledged appears. The journal after the two crashes is
copied back from a snapshot for each pair (real local stores and journals, no new
workspace built per pair).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import datahub.writeback as writeback
from datahub.errors import StorageError
from tests.ram import RAM, ram_dir, ram_usable
from tests.writeback.conftest import Env, journal_writes_failing_at, make_env, write

BATCH = 4
NEVER = 3600.0


def _other(fingerprint: int | str) -> int | str:
    """A fingerprint of the same kind that the chunk's bytes do not have (one bit flipped): a
    CRC-32 int, or an xxh3 ``"x3:<hex>"`` (``chunks.chunk_fingerprint``, small41c)."""
    if isinstance(fingerprint, int):
        return fingerprint ^ 1
    tag, digits = fingerprint[:3], fingerprint[3:]
    return f"{tag}{int(digits, 16) ^ 1:0{len(digits)}x}"


def _payload(path: str) -> bytes:
    return hashlib.sha256(path.encode()).digest() * (3000 // 32)  # one chunk: a covered first close


@pytest.fixture
def crashed(tmp_path: Path) -> Iterator[tuple[Env, dict[str, bytes], Path]]:
    """A workspace left as a kill leaves it; returns the env, the acknowledged files and a
    snapshot of its home (journal and shared tier). All of it in RAM (tests/ram.py): the test
    copies the home back and reopens it ~30 times, each crash a kill (``abandon``), never a
    power loss, so no fsync of it matters, and its one-chunk files all go into packs (buffered
    writes: the same path on tmpfs). On the disk its fsyncs were most of its 7-8 s of wall
    (docs/benchmarks.md, "suite71")."""
    with ram_dir(tmp_path) as root:
        yield from _crashed(root)


def _crashed(tmp_path: Path) -> Iterator[tuple[Env, dict[str, bytes], Path]]:
    env = make_env(tmp_path)
    ws = env.open(background=False)
    ws.journal.defer_seconds = NEVER
    ws.mkdir("d")
    files = {f"d/f{i:02d}": _payload(f"d/f{i:02d}") for i in range(14)}
    for path in list(files)[:7]:
        write(ws, path, files[path])
    write(ws, "d/torn", _payload("torn"))
    ws.journal.settle_deferred()
    with ws.journal.write("test: a torn first close (its chunk's CRC does not match)") as txn:
        file_id = txn.entry("d/torn")["id"]
        rec = txn.file(file_id)
        ((key, (n, fp)),) = rec["unverified"].items()
        rec["unverified"] = {key: [n, _other(fp)]}
        txn.put_file(file_id, rec)
        nameless = max(i for i, _ in txn.files()) + 1000
        txn.put_file(nameless, dict(rec, unverified=None, chunks={}))
    unacked = ws.open("d/unacked", create=True)
    unacked.write(0, b"never acknowledged")
    ws.mkdir("e")  # journals d/unacked, empty and unacked
    for path in list(files)[7:]:
        write(ws, path, files[path])
    assert ws.journal.deferred() == 7
    ws.abandon()  # a kill -9: the deferred seven are only in their packs
    snap = tmp_path / "snap"
    shutil.copytree(tmp_path / "var", snap)
    yield env, files, snap
    env.close()


def _restore(env: Env, snap: Path) -> None:
    home = Path(env.config.home)
    shutil.rmtree(home)
    shutil.copytree(snap, home)


def _open_failing_at(env: Env, monkeypatch: pytest.MonkeyPatch, stop_at: int | None) -> int:
    """Open (with a failure at write transaction ``stop_at``, None: none), then a kill; returns
    how many write transactions the open began."""
    with journal_writes_failing_at(monkeypatch, stop_at) as calls:
        try:
            env.open(background=False).abandon()  # fewer transactions than ``stop_at``: a kill after
        except StorageError as exc:
            assert stop_at is not None and "test: recovery stopped" in str(exc), exc
    return calls[0]


def _check_whole(env: Env, files: dict[str, bytes], label: str) -> None:
    ws = env.open(background=False)
    try:
        names = sorted(name for name, _ in ws.listdir("d"))
        assert names == sorted(p.split("/")[1] for p in files), label
        for path, data in files.items():
            with ws.open(path) as fh:
                assert fh.read(0, ws.stat(path).size) == data, (label, path)
        with ws.journal.read() as txn:
            assert not [rec for _, rec in txn.files() if rec.get("unverified") or rec.get("unacked")], label
        assert ws.flusher.used == sum(len(d) for d in files.values()), label
    finally:
        ws.abandon()


def test_two_crashes_in_a_row_during_recovery_lose_nothing_and_bring_back_nothing(
    crashed: tuple[Env, dict[str, bytes], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    env, files, snap = crashed
    monkeypatch.setattr(writeback, "_RECOVER_BATCH", BATCH)
    total = _open_failing_at(env, monkeypatch, None)
    _check_whole(env, files, "no crash")
    assert total >= 8, total  # replay batches, epoch, judgement batches, drops
    second = snap.with_name("second")
    for first in range(1, total + 1):
        _restore(env, snap)
        _open_failing_at(env, monkeypatch, first)
        shutil.rmtree(second, ignore_errors=True)
        shutil.copytree(Path(env.config.home), second)
        for then in range(1 + first % 3, total + 1, 3):
            _restore(env, second)
            _open_failing_at(env, monkeypatch, then)
            _check_whole(env, files, f"crashed at transaction {first}, then at {then}")


def test_the_crashed_workspace_lives_in_ram(crashed: tuple[Env, dict[str, bytes], Path]) -> None:
    """Where the fixture keeps it (``crashed`` says why): on a disk only without a usable tmpfs."""
    env, _, snap = crashed
    assert (Path(env.config.home).parent.parent == RAM) == ram_usable()
    assert snap.parent == Path(env.config.home).parent
