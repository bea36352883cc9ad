"""guard19: ``cache forget-journal``'s ``LeaseGuard`` holds the lease from its first batch to its last.

The guard took the lease again (``acquire_lease``) before each batch. A take is granted on a
free or lapsed lease, so when the guard's own lease lapsed during a batch (a stalled run, a
suspended machine), the node being retired could take it, reopen its journal and let go, and
the guard's next take went through as if nothing had happened: the delete went on under a
journal that node had written meanwhile. Now each check after the first renews at the epoch
taken, which any other owner's take moves: refused, and the delete stops. The same on each
catalog a guard may ask: SQLite, MongoDB (mongomock) and the API server.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Catalog
from datahub.catalog.store import CatalogStore
from datahub.cli.journals_cmd import LeaseGuard
from datahub.config import load_config
from datahub.console.context import CliContext
from datahub.errors import Conflict
from datahub.writeback.lease import LEASE_TTL

WS = "run-42"
B_OWNER = "owner id of node b's journal"


class Clock:
    """The catalog's clock, moved by the test instead of waited for."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "mongomock", "api"])
def catalogs(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, CatalogStore, CatalogStore, Clock]]:
    """(the catalog URL the guard is configured with, the store the guard asks, the store
    node b asks directly, the catalog's clock)."""
    clock = Clock()
    if request.param == "sqlite":
        from datahub.catalog.sqlite_store import SQLiteCatalogStore

        store = SQLiteCatalogStore(tmp_path / "catalog.db", clock=clock)
        yield f"sqlite:///{tmp_path / 'catalog.db'}", store, store, clock
        store.close()
    elif request.param == "mongomock":
        from datahub.catalog.mongo_store import MongoCatalogStore

        url = f"mongomock://localhost/guard19-{uuid.uuid4().hex[:8]}"
        store = MongoCatalogStore(url, clock=clock)
        yield url, store, store, clock
        store.close()
    else:
        from datahub.catalog.http_store import HttpCatalogStore

        shared = request.getfixturevalue("api_server")
        backing, admin, services = shared.serve(tmp_path, {"clock": clock})
        remote = HttpCatalogStore(shared.server.url, token=admin)  # a global admin's, as the docs ask
        try:
            yield shared.server.url, remote, backing.store, clock
        finally:
            remote.close()
            services.close()
            backing.close()


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real API server for the module's ``api`` cases, each served its own catalog."""
    from tests.catalog.remote import SharedServer

    server = SharedServer(tmp_path_factory.mktemp("api"))
    yield server
    server.stop()


def test_a_lease_lost_and_freed_between_two_batches_stops_the_delete(
    catalogs: tuple[str, CatalogStore, CatalogStore, Clock], tmp_path: Path
) -> None:
    url, asked, node_b, clock = catalogs
    taken = node_b.acquire_lease(WS, B_OWNER, "host b pid 1", LEASE_TTL)  # node b wrote, then was retired
    node_b.release_lease(WS, B_OWNER, taken.epoch)
    config = load_config(env={}, overrides={"home": str(tmp_path / "a"), "catalog_url": url})
    ctx = CliContext(config)
    ctx._services["catalog"] = Catalog(asked)
    guard = LeaseGuard(ctx, WS, f"journal 00ff of workspace {WS!r}", force=False)
    guard.check()  # before the first batch: taken under the command's own id
    first = guard.taken.epoch
    clock.now += 2 * LEASE_TTL  # the command stalls past its lease's ttl in a batch
    back = node_b.acquire_lease(WS, B_OWNER, "host b pid 1", LEASE_TTL)  # node b takes it back ...
    assert back.epoch == first + 1
    node_b.release_lease(WS, B_OWNER, back.epoch)  # ... writes under its journal, and lets go
    with pytest.raises(Conflict, match="that this command held for the delete is no longer its own"):
        guard.check()  # before the next batch: the delete stops here
    guard.release()  # nothing of its own to free
    now = node_b.lease(WS)
    assert (now.owner, now.epoch) == (B_OWNER, back.epoch) and now.expires <= 0  # as node b left it


def test_a_renewed_lease_stays_the_commands_to_the_end(
    catalogs: tuple[str, CatalogStore, CatalogStore, Clock], tmp_path: Path
) -> None:
    """The same check renews a lease nobody took meanwhile, however late (the catalog's rule),
    and keeps node b out; the release at the end frees it for b."""
    url, asked, node_b, clock = catalogs
    taken = node_b.acquire_lease(WS, B_OWNER, "host b pid 1", LEASE_TTL)
    node_b.release_lease(WS, B_OWNER, taken.epoch)
    config = load_config(env={}, overrides={"home": str(tmp_path / "a"), "catalog_url": url})
    ctx = CliContext(config)
    ctx._services["catalog"] = Catalog(asked)
    guard = LeaseGuard(ctx, WS, f"journal 00ff of workspace {WS!r}", force=False)
    guard.check()
    clock.now += LEASE_TTL / 2
    guard.check()
    with pytest.raises(Conflict, match="open for writing elsewhere"):
        node_b.acquire_lease(WS, B_OWNER, "host b pid 1", LEASE_TTL)
    clock.now += 2 * LEASE_TTL  # lapsed, but nobody took it: still the command's epoch
    guard.check()
    guard.release()
    assert node_b.acquire_lease(WS, B_OWNER, "host b pid 1", LEASE_TTL).epoch == 3
