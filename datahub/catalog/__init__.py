"""Versioned dataset catalog: datasets, immutable versions (snapshots), records, diff.

Open one with ``open_catalog(url)``:

- ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` — the embedded default;
- ``mongodb://host[:port]/db?...`` (or ``mongodb+srv://``) — production, a replica set;
- ``mongomock://anything/db`` — an in-process stand-in for tests;
- ``http(s)://host:port`` — a datahub API server (``datahub serve``), with the API token in
  ``$DATAHUB_API_TOKEN`` (``datahub.catalog.http_store``), its calls retried on the schedule
  ``retry`` gives (the configuration's ``[catalog]`` section: ``open_catalog(url,
  retry=config.catalog)``), else the defaults of ``datahub.api_client.ApiClient``.
"""

from __future__ import annotations

from typing import Protocol

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
from datahub.validation import without_password


class RetrySchedule(Protocol):
    """How a remote catalog's calls are retried (``datahub.config.CatalogConfig`` is one)."""

    retry_attempts: int
    retry_backoff: float
    retry_budget: float


def open_store(url: str, *, retry: RetrySchedule | None = None) -> CatalogStore:
    """The CatalogStore a catalog URL names (stores are imported only when used). ``retry``
    applies to an http(s) catalog only: the other stores retry inside their own driver."""
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

        options = {}
        if retry is not None:
            options = {
                "attempts": retry.retry_attempts,
                "backoff": retry.retry_backoff,
                "budget": retry.retry_budget,
            }
        return HttpCatalogStore(url, **options)  # the API token comes from $DATAHUB_API_TOKEN
    raise InvalidInput(
        f"unsupported catalog URL {without_password(url)!r}: use sqlite:///path.db, mongodb://host/db, mongomock://x/db "
        "or http(s)://datahub-api:port"
    )


def open_catalog(url: str, *, retry: RetrySchedule | None = None) -> Catalog:
    """Open the catalog at ``url`` (see the module docstring for the URL forms); ``retry``: a
    remote catalog's retry schedule (pass the configuration's ``catalog`` section)."""
    return Catalog(open_store(url, retry=retry))


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
    "RetrySchedule",
    "TokenInfo",
    "Version",
    "open_catalog",
    "open_store",
    "snapshot_dataset_name",
    "snapshot_name",
]
