"""One way to connect to MongoDB, for every component that keeps state there.

The catalog store, the task queue and the CSI controller's volume records share a database,
so they must agree on what a URL means and on the guarantees of the connection: majority
writes that are retried, majority reads, a bounded server selection. ``mongomock://`` is the
sanctioned test stand-in (no MongoDB server can run in CI); it is never chosen for a
``mongodb://`` URL.

A client is per process (``ProcessClient``, fork28). pymongo documents ``MongoClient`` as not
fork-safe: its pooled sockets and monitor threads are the parent's, and a child that uses the
parent's client gets pymongo's "MongoClient opened before fork" warning and pools pymongo
reset behind the parent's back. A forked child (a DataLoader worker, a ``multiprocessing``
worker with the "fork" start method) that uses a store or queue its parent opened makes its
own client on first use; the parent's is kept there, never used or closed
(``datahub.procs.PerProcess``).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import pymongo

from datahub.errors import InvalidInput
from datahub.procs import PerProcess
from datahub.validation import unparsable_url


def database_name(url: str) -> str:
    """The database a MongoDB URL names (``datahub`` if none)."""
    return urlsplit(url).path.lstrip("/") or "datahub"


def connect(url: str) -> tuple[Any, str]:
    """(client, database name) for ``mongodb://``, ``mongodb+srv://`` or ``mongomock://`` URLs."""
    db_name = database_name(url)
    if urlsplit(url).scheme == "mongomock":
        import mongomock

        return mongomock.MongoClient(), db_name
    try:
        client = pymongo.MongoClient(
            url,
            w="majority",
            retryWrites=True,
            retryReads=True,
            readConcernLevel="majority",
            serverSelectionTimeoutMS=10_000,
        )
    except (ValueError, pymongo.errors.InvalidURI):  # a bare ValueError was "a datahub bug"
        raise unparsable_url(
            url, "MongoDB URL", "mongodb://[USER:PASSWORD@]HOST[:PORT]/DB[?OPTIONS]"
        ) from None
    return client, db_name


class ProcessClient:
    """This process's MongoDB client for one server: ``get`` answers the client of the process
    that calls it. Thread-safe, as pymongo's client is.

    ``url``: what a process connects to. ``client``: the one to use in the process that made
    this object (tests share one mongomock server between stores); ``close`` closes it only
    if ``closes_given``. Without ``url`` a child copies the given client's settings (pymongo's
    ``_duplicate``). A child's mongomock client holds the child's copy of the parent's mock
    server, so a child sees the parent's data and indexes as of the fork, as it would on a
    real server, and writes only its own copy."""

    __slots__ = ("_clients", "_origin", "url")

    def __init__(self, url: str = "", client: Any = None, *, closes_given: bool = False) -> None:
        if not url and client is None:
            raise InvalidInput("a MongoDB client needs a URL (mongodb://host/db) or a client to use")
        self.url = url
        # (the process that made the first client, that client, close it on close)
        self._origin: tuple[int, Any, bool] | None = (
            (os.getpid(), client, closes_given) if client is not None else None
        )
        self._clients: PerProcess[tuple[Any, bool]] = PerProcess(self._make)

    def _make(self) -> tuple[Any, bool]:
        origin = self._origin
        if origin is not None and origin[0] == os.getpid():
            return origin[1], origin[2]
        if origin is None:  # the first client, in the process that uses it first
            client = connect(self.url)[0]
            self._origin = (os.getpid(), client, True)
            return client, True
        return _same_server(origin[1], self.url), True  # a forked child's own

    def get(self) -> Any:
        """This process's client, made now if it has none."""
        return self._clients.get()[0]

    def close(self) -> None:
        """Close this process's client if it is ours to close; never a parent's (in a forked
        child it was never used there: closing it would end the parent's server sessions)."""
        made = self._clients.drop()
        if made is not None and made[1]:
            made[0].close()


def _same_server(client: Any, url: str) -> Any:
    """A new client to the server of ``client`` (a parent's), for a forked child."""
    if type(client).__module__.startswith("mongomock"):
        import mongomock

        return mongomock.MongoClient(_store=client._store)  # the child's copy of the mock server
    if url:
        return connect(url)[0]
    return client._duplicate()  # pymongo's own copy of a client's arguments
