"""Writer leases (datahub.catalog.leases) on every store: sqlite, mongomock, and the HTTP
store over a real API server (conftest's ``catalog`` fixture runs each)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from datahub.catalog import Catalog
from datahub.errors import Conflict, InvalidInput, InvalidName


def test_a_lease_is_taken_once_renewed_by_its_owner_and_passes_on_at_a_higher_epoch(catalog: Catalog) -> None:
    store = catalog.store
    first = store.acquire_lease("ws", "owner-a", "host a pid 1", 60)
    assert (first.name, first.owner, first.epoch) == ("ws", "owner-a", 1)
    assert first.holder.startswith("host a pid 1")
    assert first.expires > time.time() + 30
    with pytest.raises(
        Conflict, match=r"workspace 'ws' is open for writing elsewhere: host a pid 1.* lapses in"
    ) as e:
        store.acquire_lease("ws", "owner-b", "host b pid 2", 60)
    assert e.value.details["epoch"] == 1 and "owner-a" not in e.value.message  # the id stays secret
    assert store.acquire_lease("ws", "owner-a", "host a pid 3", 60).epoch == 1  # already ours
    assert store.renew_lease("ws", "owner-a", 1, 60).epoch == 1
    with pytest.raises(Conflict, match="no longer ours"):
        store.renew_lease("ws", "owner-b", 1, 60)
    store.release_lease("ws", "owner-b", 1)  # not b's: nothing happens
    with pytest.raises(Conflict):
        store.acquire_lease("ws", "owner-b", "host b pid 2", 60)
    store.release_lease("ws", "owner-a", 1)
    with pytest.raises(Conflict, match="no longer ours"):
        store.renew_lease("ws", "owner-a", 1, 60)  # released: renewing does not take it back
    second = store.acquire_lease("ws", "owner-b", "host b pid 2", 60)
    assert second.epoch == 2
    with pytest.raises(Conflict, match=r"\(epoch 1\) is no longer ours.*host b pid 2"):
        store.renew_lease("ws", "owner-a", 1, 60)
    assert store.acquire_lease("other", "owner-a", "host a pid 1", 60).epoch == 1  # one lease per name


def test_a_lapsed_lease_is_taken_over_and_its_old_owner_cannot_renew_it(catalog: Catalog) -> None:
    store = catalog.store
    store.acquire_lease("ws", "owner-a", "host a pid 1", 0.2)
    deadline = time.monotonic() + 60
    while True:  # until the store's clock passes the expiry
        try:
            taken = store.acquire_lease("ws", "owner-b", "host b pid 2", 60)
            break
        except Conflict:
            assert time.monotonic() < deadline, "the lease never lapsed"
            time.sleep(0.05)
    assert taken.epoch == 2 and taken.owner == "owner-b"
    with pytest.raises(Conflict, match="no longer ours"):
        store.renew_lease("ws", "owner-a", 1, 60)
    store.release_lease("ws", "owner-a", 1)  # a late release of the old holder frees nothing
    assert store.renew_lease("ws", "owner-b", 2, 60).epoch == 2


@pytest.mark.parametrize(
    ("name", "owner", "ttl", "error"),
    [("Bad Name", "o", 10, InvalidName), ("ws", "", 10, InvalidInput), ("ws", "o", 0, InvalidInput),
     ("ws", "o", 10**6, InvalidInput)],
)  # fmt: skip
def test_a_malformed_lease_request_is_refused(
    catalog: Catalog, name: str, owner: str, ttl: float, error
) -> None:
    with pytest.raises(error):
        catalog.store.acquire_lease(name, owner, "host", ttl)


def test_a_lease_keeps_its_commit_target_until_a_take_names_another(catalog: Catalog) -> None:
    """The target survives release and lapse (it says whose workspace the name is); a take that
    names none keeps it, one that names another replaces it."""
    store = catalog.store
    assert store.acquire_lease("ws", "owner-a", "host a", 60, "pets").dataset == "pets"
    store.release_lease("ws", "owner-a", 1)
    taken = store.acquire_lease("ws", "owner-b", "host b", 60)  # e.g. `datahub cache flush`
    assert (taken.epoch, taken.dataset) == (2, "pets")
    assert store.renew_lease("ws", "owner-b", 2, 60).dataset == "pets"
    store.release_lease("ws", "owner-b", 2)
    assert store.acquire_lease("ws", "owner-b", "host b", 60, "outputs").dataset == "outputs"
    assert store.acquire_lease("fresh", "owner-a", "host a", 60).dataset == ""
    with pytest.raises(InvalidName):
        store.acquire_lease("ws2", "owner-a", "host a", 60, "Bad Target")


def test_an_admin_break_fences_the_holder_and_frees_the_lease_at_its_expiry_or_at_once(
    catalog: Catalog,
) -> None:
    """A break (the API: global admins only) takes the lease from its holder: the holder can
    neither renew nor take it back at its epoch and its late release frees nothing. It stays
    held until its expiry (a live holder fences first: never two writers), or is free at once
    (``at_once``: a holder known gone); the next take is at a higher epoch, on the target the
    break names."""
    store = catalog.store
    store.acquire_lease("ws", "squatter", "host e", 3600, "mine")
    broken = store.break_lease("ws", "pets")
    assert broken is not None and (broken.owner, broken.dataset) == ("", "pets")
    assert broken.expires > time.time() + 3000  # the expiry it had
    with pytest.raises(Conflict, match="no longer ours"):
        store.renew_lease("ws", "squatter", 1, 3600)
    store.release_lease("ws", "squatter", 1)
    with pytest.raises(Conflict, match=r"lapses in \d+ s \(broken: it cannot be renewed\)"):
        store.acquire_lease("ws", "node-b", "host b", 60)
    with pytest.raises(Conflict):
        store.acquire_lease("ws", "squatter", "host e", 3600)
    assert store.break_lease("ws", "pets", at_once=True).expires <= 0
    taken = store.acquire_lease("ws", "node-b", "host b", 60)
    assert (taken.owner, taken.epoch, taken.dataset) == ("node-b", 2, "pets")
    with pytest.raises(Conflict, match="open for writing elsewhere"):
        store.acquire_lease("ws", "squatter", "host e", 3600)
    assert store.break_lease("never-leased") is None


def user_version(path, version: int | None = None, *statements: str) -> int:
    """The schema version of the SQLite file at ``path``, after turning it back into a
    ``version`` file if given (``statements`` undo what came after that version). Such a file
    had its leases in its own table: no ``.leases`` file beside it (sqlite_leases, leftovers22),
    no triggers that refuse writes of that table."""
    conn = sqlite3.connect(path)
    try:
        if version is not None:
            conn.execute("DROP TRIGGER IF EXISTS leases_moved_insert")
            conn.execute("DROP TRIGGER IF EXISTS leases_moved_update")
            own = Path(f"{path}.leases")
            if own.exists():  # its leases back where such a file kept them
                moved = sqlite3.connect(own)
                rows = moved.execute(
                    "SELECT name, owner, holder, epoch, expires, dataset FROM leases"
                ).fetchall()
                moved.close()
                conn.executemany("INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?, ?)", rows)
                conn.commit()
            for leases in Path(path).parent.glob(Path(path).name + ".leases*"):
                leases.unlink()
        for statement in statements:
            conn.execute(statement)
        if version is not None:
            conn.execute(f"PRAGMA user_version = {version}")
            conn.commit()
        return conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()


def test_a_version_6_sqlite_catalog_keeps_its_leases_and_gains_their_commit_target(tmp_path) -> None:
    """Schema 7 adds ``leases.dataset``; a version-6 file opens, its leases are still held
    (no target: the next take that names one sets it)."""
    from datahub.catalog.sqlite_schema import SCHEMA_VERSION
    from datahub.catalog.sqlite_store import SQLiteCatalogStore

    path = tmp_path / "c.db"
    with Catalog(SQLiteCatalogStore(path)) as cat:
        cat.create_dataset("ds", description="d")
        cat.store.acquire_lease("ws", "owner-a", "host a", 600, "ds")
    user_version(path, 6, "DROP INDEX leases_by_target", "ALTER TABLE leases DROP COLUMN dataset")
    with Catalog(SQLiteCatalogStore(path)) as cat:
        assert cat.get_dataset("ds").description == "d"
        with pytest.raises(Conflict, match="open for writing elsewhere: host a"):
            cat.store.acquire_lease("ws", "owner-b", "host b", 60)
        renewed = cat.store.renew_lease("ws", "owner-a", 1, 60)
        assert (renewed.epoch, renewed.dataset) == (1, "")
        assert cat.store.acquire_lease("ws", "owner-a", "host a", 60, "ds").dataset == "ds"
    assert (
        user_version(path) == SCHEMA_VERSION == 10
    )  # 8: the lease list's indexes (leasefilter18); 9: browser_sessions; 10: catalog_meta


def test_a_version_5_sqlite_catalog_gains_the_lease_table(tmp_path) -> None:
    """Schema 6 adds ``leases``; a file written before opens, keeps its datasets, and leases work."""
    from datahub.catalog.sqlite_schema import SCHEMA_VERSION
    from datahub.catalog.sqlite_store import SQLiteCatalogStore

    path = tmp_path / "c.db"
    with Catalog(SQLiteCatalogStore(path)) as cat:
        cat.create_dataset("ds", description="d")
    user_version(path, 5, "DROP TABLE leases")
    with Catalog(SQLiteCatalogStore(path)) as cat:
        assert cat.get_dataset("ds").description == "d"
        assert cat.store.acquire_lease("ws", "owner-a", "host a", 60).epoch == 1
    assert user_version(path) == SCHEMA_VERSION


def test_a_take_checked_against_a_commit_target_that_changed_meanwhile_is_refused() -> None:
    """The API reads the lease, checks the caller's role on its target, then takes it naming
    the target it checked (``bound``): a target changed in between (a break, another take) is
    Conflict, never a take on a target nobody checked."""
    from datahub.catalog.leases import Lease, decide

    released = Lease("ws", "owner-a", "host a", 3, 0.0, "pets")
    # the new target goes unnamed: the taker was never checked against it (review15a)
    with pytest.raises(Conflict, match=r"commit target of workspace 'ws' changed .*; retry") as err:
        decide(released, "ws", "owner-b", "host b", 60, 100.0, "mine", bound="")
    assert "pets" not in err.value.message
    with pytest.raises(Conflict, match=r"commit target of workspace 'ws' changed .*; retry"):
        decide(None, "ws", "owner-b", "host b", 60, 100.0, bound="pets")
    taken = decide(released, "ws", "owner-b", "host b", 60, 100.0, bound="pets")
    assert (taken.epoch, taken.dataset, taken.expires) == (4, "pets", 160.0)
