"""Catalog fixtures: one ``catalog`` per store so the conformance suite runs against each.

``mongomock`` always runs; set ``DATAHUB_TEST_MONGO_URI=mongodb://host:27017`` to add a real
MongoDB (each test then uses a fresh database that is dropped afterwards).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Catalog, Record, open_catalog

STORES = ["sqlite"] + (["mongo"] if os.environ.get("DATAHUB_TEST_MONGO_URI") else [])


def catalog_url(kind: str, tmp_path: Path) -> str:
    """A fresh, empty catalog of ``kind`` for one test."""
    db = f"dh_test_{uuid.uuid4().hex[:12]}"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    if kind == "mongomock":
        return f"mongomock://localhost/{db}"
    base = os.environ["DATAHUB_TEST_MONGO_URI"].rstrip("/")
    host, _, query = base.partition("?")
    return f"{host.split('/', 3)[0]}//{host.split('/', 3)[2]}/{db}" + (f"?{query}" if query else "")


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    url = catalog_url(request.param, tmp_path)
    yield url
    if request.param == "mongo":
        import pymongo  # only to drop the per-test database on the real server

        client = pymongo.MongoClient(os.environ["DATAHUB_TEST_MONGO_URI"])
        client.drop_database(url.rsplit("/", 1)[1].partition("?")[0])
        client.close()


@pytest.fixture
def catalog(store_url: str) -> Iterator[Catalog]:
    cat = open_catalog(store_url)
    try:
        yield cat
    finally:
        cat.close()


def rec(key: str, etag: str = "e1", size: int = 10, **fields: object) -> Record:
    """A record pointing at a made-up object; tests only compare catalog metadata."""
    return Record(key, f"s3://bucket/{key}", etag, size, **fields)  # type: ignore[arg-type]
