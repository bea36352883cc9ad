"""review15a: writer leases' commit target (lease15) where two writers meet the store.

A lease document written before lease15 has no ``dataset`` field. The compare-and-swap of
``MongoCatalogStore._lease_turn`` matches it with ``dataset: None``; these check that every
turn on such a document (take, renew, release, break) still works and that a take checked
against no target is refused once the name is bound. And two servers on one SQLite file:
the bound-target check is made inside the store's transaction, so only one binds a name."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog.mongo_store import MongoCatalogStore
from datahub.errors import Conflict
from tests.catalog.conftest import make_store
from tests.labelx.test_audit15 import usual_umask  # noqa: F401 - a fixture


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MongoCatalogStore]:
    made = make_store("mongomock", tmp_path)
    assert isinstance(made, MongoCatalogStore)
    yield made
    made.close()


def _legacy(store: MongoCatalogStore, name: str, owner: str, expires: float, epoch: int = 1) -> None:
    """A lease document as a datahub before lease15 wrote it: no ``dataset``."""
    store.leases.insert_one(
        {"_id": name, "owner": owner, "holder": f"host of {owner}", "epoch": epoch, "expires": expires}
    )


def test_a_live_lease_from_before_lease15_is_renewed_released_and_then_bound(
    store: MongoCatalogStore,
) -> None:
    now = store.clock()
    _legacy(store, "ws", "owner-a", now + 600)
    with pytest.raises(Conflict, match="open for writing elsewhere: host of owner-a"):
        store.acquire_lease("ws", "owner-b", "host b", 60, "pets")
    renewed = store.renew_lease("ws", "owner-a", 1, 60)
    assert (renewed.epoch, renewed.dataset) == (1, "")
    store.release_lease("ws", "owner-a", 1)
    assert store.lease("ws").expires <= 0
    taken = store.acquire_lease("ws", "owner-b", "host b", 60, "pets")
    assert (taken.epoch, taken.dataset) == (2, "pets")
    assert store.leases.find_one({"_id": "ws"})["dataset"] == "pets"


def test_a_break_of_a_lease_from_before_lease15_fences_its_holder(store: MongoCatalogStore) -> None:
    _legacy(store, "ws", "owner-a", store.clock() + 600)
    broken = store.break_lease("ws", "pets", at_once=True)
    assert (broken.owner, broken.expires <= 0, broken.dataset) == ("", True, "pets")  # free now
    with pytest.raises(Conflict, match="no longer ours"):
        store.renew_lease("ws", "owner-a", 1, 60)


def test_a_bound_take_on_a_legacy_document_rebound_meanwhile_is_refused(store: MongoCatalogStore) -> None:
    """The API read the legacy lease (no target), checked the caller on that, and takes it with
    ``bound=""``; another server bound it to ``pets`` in between: Conflict, not a take."""
    _legacy(store, "ws", "owner-a", 0.0)
    store.acquire_lease("ws", "owner-c", "host c", 60, "pets")
    store.release_lease("ws", "owner-c", 2)
    with pytest.raises(Conflict, match="changed while"):
        store.acquire_lease("ws", "owner-b", "host b", 60, "eve-out", bound="")


def test_two_servers_on_one_sqlite_file_never_both_bind_a_fresh_name(tmp_path: Path) -> None:
    """Two API servers share one catalog file. Each read the fresh name's lease (none), checked
    its caller against no target, and takes it bound to that: the second take, whose caller
    was never checked against the target the first bound, is refused, before and after the
    first holder releases (the check has to be made again on the target as it is now)."""
    from datahub.catalog.sqlite_store import SQLiteCatalogStore

    one, two = SQLiteCatalogStore(tmp_path / "c.db"), SQLiteCatalogStore(tmp_path / "c.db")
    try:
        assert one.lease("ws") is None and two.lease("ws") is None
        first = one.acquire_lease("ws", "owner-a", "node a [bob]", 60, "pets", bound="")
        assert (first.epoch, first.dataset) == (1, "pets")
        with pytest.raises(Conflict, match="changed while"):
            two.acquire_lease("ws", "owner-e", "node e [eve]", 60, "eve-out", bound="")
        one.release_lease("ws", "owner-a", 1)
        with pytest.raises(Conflict, match="changed while"):
            two.acquire_lease("ws", "owner-e", "node e [eve]", 60, "eve-out", bound="")
        assert one.lease("ws").dataset == two.lease("ws").dataset == "pets"
    finally:
        one.close()
        two.close()


def test_a_new_catalog_through_a_symlink_is_owner_only(tmp_path: Path, usual_umask: None) -> None:  # noqa: F811
    """``home/catalog.db`` is a link to a file not made yet on another volume (a home kept small,
    the catalog on a data disk). ``create_private`` saw no file (``exists`` follows the link),
    its ``link`` into place met the link itself, and it returned as if done: SQLite then made
    the target with the umask, 0644, readable by every account (audit15's rule)."""
    from datahub.catalog import open_catalog

    (tmp_path / "data").mkdir()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "catalog.db").symlink_to(tmp_path / "data" / "catalog.db")
    catalog = open_catalog(f"sqlite:///{tmp_path / 'home' / 'catalog.db'}")
    try:
        catalog.create_dataset("pets", owner="alice")
        made = [f for f in (tmp_path / "data").iterdir() if not f.name.startswith(".")]
        assert "catalog.db" in {f.name for f in made}
        assert {f.name: oct(stat.S_IMODE(f.stat().st_mode)) for f in made} == {f.name: "0o600" for f in made}
    finally:
        catalog.close()
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["catalog.db"]  # no stray staged file
