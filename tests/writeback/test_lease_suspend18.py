"""A node suspended for longer than its lease's ttl fences itself when it resumes (review18c's
finding). Its fence measured time on ``time.monotonic``, which stops during a suspend, while
the catalog's expiry runs on: after the resume the node took its lease for still held and
went on acknowledging writes that another node, which took the lapsed lease meanwhile, could
overwrite. The suspend is simulated: ``CLOCK_BOOTTIME`` jumps by the suspend, the monotonic
clock does not (what the kernel does)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import StorageError
from datahub.writeback.lease import WriterLease

TTL = 30.0


def test_a_suspend_longer_than_the_ttl_fences_the_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteCatalogStore(tmp_path / "catalog.db")
    journal = tmp_path / "journal"
    journal.mkdir()
    lease = WriterLease(store, "ws", "workspace 'ws'", journal, ttl=TTL)
    try:
        lease.check("a write before the suspend")
        real = time.clock_gettime
        suspended = TTL + 1

        def after_resume(clock_id: int) -> float:
            return real(clock_id) + (suspended if clock_id == time.CLOCK_BOOTTIME else 0.0)

        monkeypatch.setattr(time, "clock_gettime", after_resume)
        with pytest.raises(StorageError, match="no longer holds the writer lease"):
            lease.check("a write after the resume")
    finally:
        monkeypatch.undo()
        lease.release()
        store.close()
