"""Catalog fixtures: one ``catalog`` per store so the conformance suite runs against each.

``mongomock`` always runs, and so does ``http``: an HttpCatalogStore talking to a real
``datahub serve`` over SQLite (tests/catalog/remote.py; one server per module, a fresh catalog
behind it per test); set ``DATAHUB_TEST_MONGO_URI=mongodb://host:27017`` to add a real
MongoDB (each test then uses a fresh database that is dropped afterwards).

Stores are built with tiny batch and page sizes so that a few hundred records already
exercise multi-batch commits and multi-page listings (and mongomock stays fast).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from datahub.catalog import Catalog, CatalogStore, Record
from datahub.catalog.mongo_store import MongoCatalogStore
from datahub.catalog.sqlite_store import SQLiteCatalogStore

STORES = ["sqlite", "mongomock", "http"] + (["mongo"] if os.environ.get("DATAHUB_TEST_MONGO_URI") else [])
SMALL = {"batch_size": 16, "page_size": 7}


def mongo_url(kind: str) -> str:
    """A URL naming a fresh database: mongomock, or on the real server of DATAHUB_TEST_MONGO_URI."""
    db = f"dh_test_{uuid.uuid4().hex[:12]}"
    if kind == "mongomock":
        return f"mongomock://localhost/{db}"
    base, _, query = os.environ["DATAHUB_TEST_MONGO_URI"].partition("?")
    scheme, _, rest = base.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}/{db}" + (f"?{query}" if query else "")


def make_store(kind: str, tmp_path: Path, **options: Any) -> CatalogStore:
    if kind == "sqlite":
        return SQLiteCatalogStore(tmp_path / "catalog.db", **(SMALL | options))
    if kind == "http":
        from tests.catalog.remote import served_store

        return served_store(tmp_path, SMALL | options)
    return MongoCatalogStore(mongo_url(kind), **(SMALL | options))


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def shared_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The module's API server for its ``http`` catalogs (tests/catalog/remote.py, SharedServer):
    each test still gets a fresh catalog of its own behind it."""
    from tests.catalog.remote import SharedServer

    server = SharedServer(tmp_path_factory.mktemp("api"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def catalog(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Catalog]:
    if store_kind == "http":  # a server per module, not per test (the catalog is the test's own)
        store = request.getfixturevalue("shared_api").store(tmp_path, SMALL)
    else:
        store = make_store(store_kind, tmp_path)
    try:
        yield Catalog(store)
    finally:
        if store_kind == "mongo":
            store.drop()  # type: ignore[attr-defined]
        store.close()


def rec(key: str, etag: str = "e1", size: int = 10, **fields: object) -> Record:
    """A record pointing at a made-up object; tests only compare catalog metadata."""
    return Record(key, f"s3://bucket/{key}", etag, size, **fields)  # type: ignore[arg-type]


def raw_store(catalog: Catalog) -> CatalogStore:
    """The store to write legacy data to, bypassing today's checks (as an older datahub did):
    for the ``http`` store, the SQLite store behind its server (the API validates every write)."""
    backing = getattr(catalog.store, "backing", None)
    return backing.store if backing is not None else catalog.store


def sqlite_steps(catalog, run: Callable[[], Any]) -> tuple[int, Any]:
    """``run()``'s result and how many SQLite VM steps (in 50s) it took on ``catalog``'s store:
    a cost that does not move with the machine's load."""
    counted = [0]

    def tick() -> int:
        counted[0] += 1
        return 0

    with catalog.store._conn() as conn:
        conn.set_progress_handler(tick, 50)
    try:
        result = run()
    finally:
        with catalog.store._conn() as conn:
            conn.set_progress_handler(None, 0)
    return counted[0], result
