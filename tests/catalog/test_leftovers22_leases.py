"""leftovers22: the SQLite catalog's writer leases live in a file of their own.

A commit holds the catalog file's one write lock for its whole transaction (a 10^6-record
commit 22-37 s at load 14-17): a lease renewal waited behind it, past its holder's fence
(flaky21; bench/writeback/lease_gap.py --commit-records). Here the catalog's write lock is
held by another connection, as a commit holds it, and the busy timeout is short: a renewal
that waits for that lock fails; one that does not succeeds.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import Conflict


def test_a_lease_is_taken_renewed_and_released_while_a_commit_holds_the_catalog(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    with closing(SQLiteCatalogStore(path, busy_timeout_ms=100)) as store:
        lease = store.acquire_lease("ws", "owner-a", "host a", 30)
        with closing(sqlite3.connect(path, isolation_level=None)) as commit:
            commit.execute("BEGIN IMMEDIATE")  # a long commit's transaction, open throughout
            commit.execute(
                "INSERT INTO datasets (name, description, owner, created_at) VALUES ('x', '', '', 0)"
            )
            assert store.renew_lease("ws", "owner-a", lease.epoch, 30).epoch == lease.epoch
            assert store.acquire_lease("other", "owner-b", "host b", 30).epoch == 1
            with pytest.raises(Conflict, match="host a"):
                store.acquire_lease("ws", "owner-b", "host b", 30)
            assert [x.name for x in store.list_leases()] == ["other", "ws"]
            store.release_lease("other", "owner-b", 1)
            commit.execute("COMMIT")


def test_a_catalog_that_kept_its_leases_hands_them_over_and_refuses_them_after(tmp_path: Path) -> None:
    """A lease held in the catalog's own table (before this) is still held after the upgrade,
    and an older datahub beside this one can no longer write that table: it fails, loudly,
    rather than hold a lease nobody else sees (two writers)."""
    path = tmp_path / "catalog.db"
    SQLiteCatalogStore(path).close()
    for leases in tmp_path.glob("catalog.db.leases*"):  # the file as an older datahub left it
        leases.unlink()
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("DROP TRIGGER leases_moved_insert")
        conn.execute("DROP TRIGGER leases_moved_update")
        conn.execute("INSERT INTO leases VALUES ('ws', 'owner-a', 'host a', 3, 4e9, 'pets')")
        conn.commit()
    with closing(SQLiteCatalogStore(path)) as store:
        with pytest.raises(Conflict, match="host a"):
            store.acquire_lease("ws", "owner-b", "host b", 30)
        assert store.renew_lease("ws", "owner-a", 3, 30).dataset == "pets"
        with closing(sqlite3.connect(path)) as older, pytest.raises(sqlite3.IntegrityError, match="moved"):
            older.execute("INSERT OR REPLACE INTO leases VALUES ('ws', 'owner-c', 'host c', 4, 4e9, '')")
    with closing(SQLiteCatalogStore(path)) as store:  # once: a later open copies nothing over it
        assert store.lease("ws").epoch == 3 and store.lease("ws").expires < 4e9


def test_the_leases_file_follows_the_catalogs_mode(tmp_path: Path) -> None:
    """A catalog its owner shares with a group: every member who may take a lease there may
    take one in the leases' file too, made before the catalog was shared or after."""
    import os
    import stat

    path = tmp_path / "catalog.db"
    SQLiteCatalogStore(path).close()
    assert stat.S_IMODE((tmp_path / "catalog.db.leases").stat().st_mode) == 0o600
    os.chmod(path, 0o660)
    SQLiteCatalogStore(path).close()
    assert stat.S_IMODE((tmp_path / "catalog.db.leases").stat().st_mode) == 0o660
