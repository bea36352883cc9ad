"""A closed workspace runs no thread of its own, even when its close failed (flake17).

Why: a fenced holder's close fails at the commit of a file still open, and that failure
skipped the flusher's stop: its thread outlived the workspace, waking every flush interval
to flush a closed one (three of them were alive in the worker that ran
tests/writeback/test_staged_descriptors.py after test_lease.py). Two "nodes" share one
SQLite catalog, as in ``test_lease.py``, whose helpers these reuse.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import StorageError
from datahub.writeback import open_workspace
from tests.writeback.conftest import left_running
from tests.writeback.test_lease import LEASE_TTL, Clock, catalog, clock, node, wait_fenced

__all__ = ["catalog", "clock"]  # fixtures


def test_a_workspace_whose_close_failed_at_a_fenced_commit_leaves_no_thread_running(
    tmp_path: Path, catalog: SQLiteCatalogStore, clock: Clock
) -> None:
    (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
    before = set(threading.enumerate())
    ws_a = open_workspace("shared", config_a, stores_a, lease=catalog, lease_ttl=LEASE_TTL)
    fh = ws_a.open("open.bin", create=True, truncate=True)
    fh.write(0, b"written by node a, still open at its close")
    clock.now += 60  # a's lease lapsed at the catalog: b takes the workspace over
    ws_b = open_workspace("shared", config_b, stores_b, lease=catalog)
    try:
        wait_fenced(ws_a)
        with pytest.raises(StorageError, match="writer lease"):
            ws_a.close()  # the commit of open.bin is fenced
    finally:
        ws_b.close()
        stores_a.close()
        stores_b.close()
    assert left_running(before) == []
