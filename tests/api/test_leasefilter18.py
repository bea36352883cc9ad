"""leasefilter18: the stores filter the lease list a caller who is not a global admin sees.

The route read a window of rows and filtered them itself, so a caller who saw none of them got
the last hidden name as ``next`` (review18b). Now ``list_leases(targets=..., taker=...)``
answers only what the caller may see: the leases bound to the datasets it may write, and those
it took (the holder's `` [principal]``) for a dataset that does not exist, read through an
index per target and one for the taker, never the leases hidden from it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from datahub.catalog import Catalog, CatalogStore
from datahub.catalog.leases import taker_of
from datahub.catalog.sqlite_schema import SCHEMA_VERSION
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from tests.catalog.conftest import make_store

STORES = pytest.mark.parametrize("kind", ["sqlite", "mongomock"])
BOB = ["a-pets", "d-bobs-new", "i-pets"]  # what bob, pets' writer, sees of _fill's leases


def _take(store: CatalogStore, name: str, dataset: str, holder: str = "host n pid 7 [root]") -> None:
    store.acquire_lease(name, uuid.uuid4().hex, holder, 600, dataset)


def _fill(store: CatalogStore) -> None:
    """Leases bob may see (BOB) among those he may not: bound to a dataset he may not write
    (even one he took), to none, another's for a dataset not created yet, and holders that
    only look like his."""
    catalog = Catalog(store)
    catalog.create_dataset("pets", owner="root")
    catalog.create_dataset("vault", owner="root")
    _take(store, "a-pets", "pets")
    _take(store, "b-vault", "vault")
    _take(store, "c-none", "")
    _take(store, "d-bobs-new", "bobs-new", "host b pid 1 [bob]")
    _take(store, "e-eves-new", "eves-new", "host e pid 2 [eve]")
    _take(store, "f-bobs-vault", "vault", "host b pid 3 [bob]")  # his, but vault exists
    _take(store, "g-not-bobs", "bobs-x", "host [bob] pid 4 [eve]")
    _take(store, "h-no-space", "bobs-y", "host x[bob]")
    _take(store, "i-pets", "pets", "host e pid 5 [eve]")  # eve took it before her role went


def _walk(store: CatalogStore, limit: int, targets: list[str], taker: str) -> list[str]:
    """Every name a caller gets by following the last name of each full page."""
    got, after = [], ""
    while True:
        page = store.list_leases(after, limit, targets=targets, taker=taker)
        assert len(page) <= limit
        got += [lease.name for lease in page]
        if len(page) < limit:
            return got
        after = page[-1].name


@STORES
def test_a_store_answers_a_caller_only_the_leases_it_may_see_page_by_page(kind: str, tmp_path: Path) -> None:
    with closing(make_store(kind, tmp_path)) as store:
        _fill(store)
        for limit in (1, 2, 3, 1000):
            assert _walk(store, limit, ["pets"], "bob") == BOB, limit
            assert _walk(store, limit, [], "eve") == ["e-eves-new", "g-not-bobs"], limit
            assert _walk(store, limit, [], "alice") == [], limit
            assert _walk(store, limit, ["pets", "vault"], "") == [
                "a-pets",
                "b-vault",
                "f-bobs-vault",
                "i-pets",
            ]
        assert store.list_leases("a-pets", 1, targets=["pets"], taker="bob")[0] == store.lease("d-bobs-new")
        assert len(store.list_leases("", 1000)) == 9  # no filter: an admin's list
        Catalog(store).create_dataset("bobs-new", owner="root")  # created by another: not his now
        assert _walk(store, 2, ["pets"], "bob") == ["a-pets", "i-pets"]


def test_the_sqlite_store_reads_a_callers_page_by_index_never_by_a_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each statement a filtered page runs is a range of leases_by_target or leases_by_taker
    (and one lookup of a dataset by name): none reads the leases table, or sorts, whatever it
    holds. What keeps a caller who sees nothing among 10^5 leases from reading them all."""
    store = SQLiteCatalogStore(tmp_path / "catalog.db")
    with closing(store):
        _fill(store)
        ran: list[str] = []
        real = store._leases.connection  # the leases' own file (sqlite_leases)

        @contextlib.contextmanager
        def traced() -> Iterator[sqlite3.Connection]:
            with real() as conn:
                conn.set_trace_callback(ran.append)
                try:
                    yield conn
                finally:
                    conn.set_trace_callback(None)

        monkeypatch.setattr(store._leases, "connection", traced)
        assert [
            lease.name for lease in store.list_leases("a", 2, targets=["pets", "vault"], taker="bob")
        ] == [
            "a-pets",
            "b-vault",
        ]
        reads = [sql for sql in ran if "FROM leases" in sql]
        assert len(reads) == 3  # pets, vault (below b-vault), bob's own
        with closing(sqlite3.connect(tmp_path / "catalog.db.leases")) as conn:
            for sql in reads:
                plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
                assert any(step.startswith("SEARCH leases USING INDEX leases_by_t") for step in plan), (
                    sql,
                    plan,
                )
                assert not [step for step in plan if step.startswith("SCAN") or "TEMP B-TREE" in step], (
                    sql,
                    plan,
                )


def test_a_version_7_sqlite_catalog_gains_the_lease_list_indexes(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    with closing(SQLiteCatalogStore(path)) as store:
        _fill(store)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("DROP INDEX leases_by_target")
        conn.execute("DROP INDEX leases_by_taker")
        conn.execute("PRAGMA user_version = 7")
        conn.commit()
    with closing(SQLiteCatalogStore(path)) as store:
        assert _walk(store, 2, ["pets"], "bob") == BOB
    with closing(sqlite3.connect(path)) as conn:
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'leases'")}
        assert {"leases_by_target", "leases_by_taker"} <= indexes
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_the_mongo_store_keeps_the_taker_it_indexes(tmp_path: Path) -> None:
    with closing(make_store("mongomock", tmp_path)) as store:
        _fill(store)
        assert {"by_target", "by_taker"} <= set(store.leases.index_information())  # type: ignore[attr-defined]
        takers = {doc["_id"]: doc["taker"] for doc in store.leases.find()}  # type: ignore[attr-defined]
        assert takers["d-bobs-new"] == "bob" and takers["g-not-bobs"] == "eve"
        assert takers["c-none"] == "root" and takers["h-no-space"] == ""


@pytest.mark.parametrize(
    ("holder", "taker"),
    [
        ("host n pid 7 [bob]", "bob"),
        ("host [x] pid 7 [system:serviceaccount:ns:sa]", "system:serviceaccount:ns:sa"),
        ("host x[bob]", ""),
        ("host n pid 7 [bob] ", ""),
        ("host n pid 7 [a[b]", ""),
        ("host n pid 7", ""),
    ],
)
def test_the_taker_is_the_principal_the_server_appended(holder: str, taker: str) -> None:
    assert taker_of(holder) == taker
