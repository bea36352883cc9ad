"""Versioned dataset catalog: datasets, immutable versions (snapshots), records, diff.

Open one with ``open_catalog(url)``:

- ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` — the embedded default;
- ``mongodb://host[:port]/db?...`` (or ``mongodb+srv://``) — production, a replica set;
- ``mongomock://anything/db`` — an in-process stand-in for tests;
- ``http(s)://host:port`` — a datahub API server (``datahub serve``), with the API token in
  ``$DATAHUB_API_TOKEN`` (``datahub.catalog.http_store``).
"""

from __future__ import annotations

from datahub.catalog.catalog import Catalog
from datahub.catalog.filter import RecordFilter
from datahub.catalog.model import (
    ROLES,
    Change,
    Dataset,
    Delete,
    DiffEntry,
    Patch,
    Put,
    Record,
    TokenInfo,
    Version,
)
from datahub.catalog.snapshots import is_bucket_snapshot, snapshot_dataset_name, snapshot_name
from datahub.catalog.store import CatalogStore
from datahub.errors import InvalidInput


def open_store(url: str) -> CatalogStore:
    """The CatalogStore a catalog URL names (stores are imported only when used)."""
    if url.startswith("sqlite:///"):
        from datahub.catalog.sqlite_store import SQLiteCatalogStore

        path = url[len("sqlite:///") :]
        if not path:
            raise InvalidInput(f"catalog URL {url!r} names no file; use sqlite:///path/to/catalog.db")
        return SQLiteCatalogStore(path)
    if url.startswith(("mongodb://", "mongodb+srv://", "mongomock://")):
        from datahub.catalog.mongo_store import MongoCatalogStore

        return MongoCatalogStore(url)
    if url.startswith(("http://", "https://")):
        from datahub.catalog.http_store import HttpCatalogStore

        return HttpCatalogStore(url)  # the API token comes from $DATAHUB_API_TOKEN
    raise InvalidInput(
        f"unsupported catalog URL {url!r}: use sqlite:///path.db, mongodb://host/db, mongomock://x/db "
        "or http(s)://datahub-api:port"
    )


def open_catalog(url: str) -> Catalog:
    """Open the catalog at ``url`` (see the module docstring for the URL forms)."""
    return Catalog(open_store(url))


__all__ = [
    "is_bucket_snapshot",
    "ROLES",
    "Catalog",
    "CatalogStore",
    "Change",
    "Dataset",
    "Delete",
    "DiffEntry",
    "Patch",
    "Put",
    "Record",
    "RecordFilter",
    "TokenInfo",
    "Version",
    "open_catalog",
    "open_store",
    "snapshot_dataset_name",
    "snapshot_name",
]
