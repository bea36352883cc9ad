"""Adversarial review of smallsync19 (issue 41: a small file's first close acknowledged by its
pack's flush alone, its journal change deferred in memory; datahub/writeback/journal.py,
"Deferred covered commits").

Each test is one defect found (each failed before its fix, in this branch's commits).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.writeback.conftest import CHUNK, make_env, write

NEVER = 3600.0  # the committer's clock never writes deferred commits: a transaction or a close does


def _payload(path: str) -> bytes:
    return hashlib.sha256(path.encode()).digest() * (3000 // 32)  # one chunk: a covered first close


def test_a_close_recorded_while_the_workspace_closes_is_not_lost(tmp_path: Path) -> None:
    """Journal.submit tested covering before ``fn`` ran and Journal._record took the number
    after: a Workspace.close() whose _mark_clean (stop_covers) came in between gave the close
    cover number 1, below the journal's ``covered`` (epoch << 32), so _apply_deferred skipped
    it as applied, _view_for hid it, the clean close was recorded and recovery replayed
    nothing: an acknowledged file lost. Now such a commit goes the synced way."""
    env = make_env(tmp_path)
    try:
        ws = env.open()
        ws.journal.defer_seconds = NEVER
        write(ws, "warm", b"w")  # the id reservation (a transaction) is behind us
        journal = ws.journal

        def fence(doing: str) -> None:
            # Workspace.close() in another thread reached _mark_clean (stop_covers) while this
            # close's change was being recorded: _record runs fn outside the journal's lock
            if doing == "fsync of 'late'":
                journal.stop_covers()

        journal.fence = fence
        write(ws, "late", _payload("late"))  # acknowledged: its pack is flushed
        assert ws.stat("late").size == len(_payload("late"))  # seen by this process
        ws.close()  # a clean close: the next open replays no cover record
        ws2 = env.open()
        with ws2.open("late") as fh:
            assert fh.read(0, CHUNK) == _payload("late")
    finally:
        env.close()


def test_a_version_before_smallsync19_replays_what_a_kill_took_from_the_journal(tmp_path: Path) -> None:
    """A version before smallsync19 replays pack records only when the owner's boot differs
    from this boot (a power loss: ``txn.meta(OWNER_BOOT) not in (None, "", boot)``), as a kill
    lost nothing then. Opened after a kill of a deferring session (a rollback of the upgrade),
    it would find the same boot, replay nothing, and start a new cover epoch: the deferred
    files' records are then below ``covered`` for every later opener too, lost for good
    (seen with the code before smallsync19 on a killed worker of test_smallsync19). So what this
    version stores must differ from every boot id while a session runs."""
    from datahub.writeback import _boot_id
    from datahub.writeback.journal import OWNER_BOOT, Journal

    env = make_env(tmp_path)
    try:
        ws = env.open()
        ws.journal.defer_seconds = NEVER
        write(ws, "warm", b"w")
        write(ws, "late", _payload("late"))  # acknowledged, deferred
        assert ws.journal.deferred() == 2  # "warm" too: one byte is one chunk
        ws.abandon()  # what a kill -9 leaves
        lmdb_dir = env.config.resolved_journal_dir / "workspaces" / "ws" / "lmdb"
        journal = Journal(lmdb_dir, "the killed session's journal", readonly=True)
        try:
            with journal.read() as txn:
                owner = txn.meta(OWNER_BOOT)
                assert txn.entry("late") is None  # the kill took it from the journal
        finally:
            journal.close()
        assert owner not in (None, "", _boot_id())  # the older version's rule: it replays
    finally:
        env.close()
