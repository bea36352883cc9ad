"""Deferred covered commits (issue 41, smallsync19): a new small file's first close is
acknowledged by its pack's flush alone; its journal change waits in memory and reaches LMDB
in a batch (datahub/writeback/journal.py, "Deferred covered commits").

Each test pins one promise of that design: readers in the process see the file at once;
no LMDB transaction is made per close; a transaction that depends on a deferred commit
carries it (an unlink or a rename survives a crash as done, the file is not brought back
under its old name); a process killed between the pack's flush and the journal's write
loses no acknowledged file (recovery replays the pack records); a reader whose deferred
tuple is older than its snapshot never takes an applied change over a later one.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from datahub.writeback import journal as journal_module
from datahub.writeback.journal import Journal, Txn
from tests.writeback.conftest import CHUNK, Env, make_env, write

REPO = Path(__file__).resolve().parents[2]
NEVER = 3600.0  # the committer's clock never writes them: only a transaction or a close does


def _lmdb_has(ws, path: str) -> bool:
    """Whether LMDB itself (no deferred change over it) names ``path``."""
    journal = ws.journal
    with journal._env.begin() as raw:
        return Txn(raw, journal._dbs).entry(path) is not None


def _txnid(ws) -> int:
    return ws.journal._env.info()["last_txnid"]


def _payload(path: str) -> bytes:
    return hashlib.sha256(path.encode()).digest() * (3000 // 32)  # one chunk: a covered first close


def test_covered_closes_make_no_journal_transaction_and_are_seen_at_once(tmp_path: Path) -> None:
    env = make_env(tmp_path)  # packs
    try:
        ws = env.open()
        ws.journal.defer_seconds = NEVER
        write(ws, "warm", b"w")  # the first create reserves a block of file ids (a transaction)
        ws.mkdir("d")
        before = _txnid(ws)
        for n in range(10):
            write(ws, f"d/f{n}", _payload(f"d/f{n}"))
        assert _txnid(ws) == before  # ten closes acknowledged, no LMDB transaction among them
        assert ws.journal.deferred() == 10 and not _lmdb_has(ws, "d/f3")
        assert [name for name, _ in ws.listdir("d")] == [f"f{n}" for n in range(10)]
        assert ws.stat("d/f3").size == len(_payload("d/f3"))
        with ws.open("d/f3") as fh:
            assert fh.read(0, CHUNK) == _payload("d/f3")
        assert "d/f3" in ws.dirty()  # the flusher sees them like any acknowledged file
        ws.journal.settle_deferred()
        assert _txnid(ws) == before + 1  # all ten in one transaction
        assert ws.journal.deferred() == 0 and _lmdb_has(ws, "d/f3")
        ws.close()
        ws2 = env.open()
        assert [name for name, _ in ws2.listdir("d")] == [f"f{n}" for n in range(10)]
    finally:
        env.close()


def test_a_rename_or_unlink_of_a_deferred_file_carries_it_and_survives_a_crash(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    try:
        ws = env.open()
        ws.journal.defer_seconds = NEVER
        write(ws, "gone", _payload("gone"))
        write(ws, "moved", _payload("moved"))
        write(ws, "kept", _payload("kept"))
        assert ws.journal.deferred() == 3
        ws.unlink("gone")  # its transaction writes the three deferred commits first
        assert ws.journal.deferred() == 0 and _lmdb_has(ws, "kept")
        ws.rename("moved", "there")
        write(ws, "late", _payload("late"))  # deferred, lost from memory by the crash
        assert ws.journal.deferred() == 1
        ws2 = env.crash_and_reopen(ws)  # what a kill -9 leaves
        names = [name for name, _ in ws2.listdir("")]
        assert names == ["kept", "late", "there"]  # "gone" and "moved" are not brought back
        for path, data in (("kept", "kept"), ("late", "late"), ("there", "moved")):
            with ws2.open(path) as fh:
                assert fh.read(0, CHUNK) == _payload(data), path
    finally:
        env.close()


def test_a_reader_never_takes_an_applied_deferred_change_over_a_later_one(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "lmdb", "a journal")
    try:
        journal.defer_seconds = NEVER
        journal.start_covers(1 << 32)
        request = journal.submit(
            "fsync of 'x'", lambda txn: txn.put_entry("x", {"t": "f", "id": 7}), covered=True
        )
        assert request.wait() is None and request.cover == (1 << 32) + 1
        with journal.read() as txn:
            assert txn.entry("x") == {"t": "f", "id": 7}
            assert [name for name, _ in txn.children("")] == ["x"]
        taken = journal._deferred  # a reader that took the deferred tuple, then was descheduled
        with journal.write("unlink 'x'") as txn:  # writes the deferred commit, then removes it
            txn.del_entry("x")
        with journal._env.begin() as raw:  # its snapshot begins after both
            view = journal._view_for(raw, taken)
            assert Txn(raw, journal._dbs, view).entry("x") is None
            assert list(Txn(raw, journal._dbs, view).children("")) == []
    finally:
        journal.close()


def test_a_journal_device_short_of_room_gets_covered_commits_the_synced_way(
    tmp_path: Path, monkeypatch
) -> None:
    """Deferred commits need room in LMDB later: with less than ``DEFER_ROOM`` free on the
    journal's device, a covered commit is committed before its close returns, so a full
    device fails that close for space (docs/writeback.md, "Out of space at close")."""
    journal = Journal(tmp_path / "lmdb", "a journal")
    try:
        journal.defer_seconds = NEVER
        journal.start_covers(1 << 32)
        monkeypatch.setattr(journal_module, "DEFER_ROOM", 1 << 62)  # more than any device has
        request = journal.submit(
            "fsync of 'x'", lambda txn: txn.put_entry("x", {"t": "f", "id": 7}), covered=True
        )
        request.wait()
        assert journal.deferred() == 0 and request.cover == 0  # synced, and no record in a pack
        with journal._env.begin() as raw:
            assert Txn(raw, journal._dbs).entry("x") == {"t": "f", "id": 7}
    finally:
        journal.close()


def _worker(spec: dict) -> None:
    """Run as a process: write small files with the journal's deferral never ending, say ACK
    after each close, then wait to be killed."""
    from datahub.config import load_config
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace

    config = load_config(env={}, overrides=spec["overrides"])
    ws = open_workspace("ws", config, StoreRegistry(config))
    ws.journal.defer_seconds = NEVER
    ws.mkdir("out")  # durable: the files below are the deferred ones
    for n in range(spec["files"]):
        path = f"out/f{n}"
        write(ws, path, _payload(path))
        print(f"ACK {path} {ws.journal.deferred()}", flush=True)
    print("DONE", flush=True)
    threading.Event().wait()


def test_a_kill_between_the_pack_flush_and_the_journal_write_loses_no_acknowledged_file(
    tmp_path: Path,
) -> None:
    env: Env = make_env(tmp_path)
    overrides = {"home": str(tmp_path / "var"), "cache": {"page_size": CHUNK, "flush_interval": 3600}}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.writeback.test_smallsync19",
            json.dumps({"overrides": overrides, "files": 12}),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acked: list[str] = []
    try:
        for line in proc.stdout:
            if line.startswith("ACK "):
                _, path, deferred = line.split()
                assert int(deferred) == len(acked) + 1  # acknowledged with its journal change in memory
                acked.append(path)
            elif line.strip() == "DONE":
                break
        else:
            raise AssertionError(f"the worker ended early: {proc.stderr.read()[-3000:]}")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
        proc.stderr.close()
    try:
        assert len(acked) == 12
        lmdb_dir = env.config.resolved_journal_dir / "workspaces" / "ws" / "lmdb"
        journal = Journal(lmdb_dir, "the dead writer's journal", readonly=True)
        try:
            with journal.read() as txn:
                assert [name for name, _ in txn.children("out")] == []  # the kill took them all
        finally:
            journal.close()
        ws = env.open()  # recovery replays the twelve from their pack records
        assert [f"out/{name}" for name, _ in ws.listdir("out")] == sorted(acked)
        for path in acked:
            with ws.open(path) as fh:
                assert fh.read(0, CHUNK) == _payload(path), path
            assert "unverified" not in ws.journal_record(path)  # each chunk checked (CRC)
        ws.close()
    finally:
        env.close()


if __name__ == "__main__":
    _worker(json.loads(sys.argv[1]))
