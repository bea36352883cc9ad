"""One way to connect to MongoDB, for every component that keeps state there.

The catalog store, the task queue and the CSI controller's volume records share a database,
so they must agree on what a URL means and on the guarantees of the connection: majority
writes that are retried, majority reads, a bounded server selection. ``mongomock://`` is the
sanctioned test stand-in (no MongoDB server can run in CI); it is never chosen for a
``mongodb://`` URL.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pymongo


def connect(url: str) -> tuple[Any, str]:
    """(client, database name) for ``mongodb://``, ``mongodb+srv://`` or ``mongomock://`` URLs."""
    parts = urlsplit(url)
    db_name = parts.path.lstrip("/") or "datahub"
    if parts.scheme == "mongomock":
        import mongomock

        return mongomock.MongoClient(), db_name
    return (
        pymongo.MongoClient(
            url,
            w="majority",
            retryWrites=True,
            retryReads=True,
            readConcernLevel="majority",
            serverSelectionTimeoutMS=10_000,
        ),
        db_name,
    )
