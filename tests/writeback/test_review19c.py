"""Adversarial review of smallsync19 (issue 41: a small file's first close acknowledged by its
pack's flush alone, its journal change deferred in memory; datahub/writeback/journal.py,
"Deferred covered commits").

Each test is one defect found, xfail(strict) while the fix is smallsync19's to make: the
reason names the file, the line and the fix.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.writeback.conftest import CHUNK, make_env, write

NEVER = 3600.0  # the committer's clock never writes deferred commits: a transaction or a close does


def _payload(path: str) -> bytes:
    return hashlib.sha256(path.encode()).digest() * (3000 // 32)  # one chunk: a covered first close


@pytest.mark.xfail(
    strict=True,
    reason=(
        "review19c: datahub/writeback/journal.py Journal._record (line ~561) hands out "
        "`self._cover += 1` without checking that covering is still on: submit() tested "
        "`self._cover` before fn ran, and Workspace._mark_clean's stop_covers() set it to 0 "
        "meanwhile, so the commit gets cover number 1, below the journal's `covered` "
        "(epoch << 32): _apply_deferred skips it as applied, _view_for hides it, the clean "
        "close is recorded and recovery replays nothing. Fix: under _group, when "
        "self._cover == 0, do not defer (queue the request the synced way, cover 0, no trailer)"
    ),
)
def test_a_close_recorded_while_the_workspace_closes_is_not_lost(tmp_path: Path) -> None:
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
