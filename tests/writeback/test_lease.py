"""One writer per workspace across nodes: the writer lease in the catalog (lease14).

Two "nodes" are two homes (two journal directories, so the flock never meets) sharing one
SQLite catalog and one objects directory, as two CSI node plugins share them."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.config import load_config
from datahub.errors import Conflict, StorageError
from datahub.storage import StoreRegistry
from datahub.writeback import flush_workspace, open_workspace
from tests.writeback.conftest import CHUNK, write
from tests.writeback.flushed import copies, only_copy

# A holder's lease in the tests that want it kept until a takeover: renewed every second and
# self-fenced after 2.5 s without a renewal, so a loaded machine's renewal thread keeps it
# (0.9 s fenced node a before its upload read a chunk at load 15), while a holder still learns of
# a takeover within a second.
LEASE_TTL = 3.0


class Clock:
    """The catalog's clock, moved by the test (a lease lapses without waiting for it)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def node(tmp_path: Path, name: str):
    objects = (tmp_path / "objects").as_uri()
    config = load_config(
        env={},
        overrides={"home": str(tmp_path / name), "objects_url": objects,
                   "cache": {"page_size": CHUNK, "flush_interval": 3600}},
    )  # fmt: skip
    return config, StoreRegistry(config)


def wait_fenced(ws) -> None:
    """Until the workspace's renewal thread (every ttl/3) learns it lost the lease (its fence closes)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ws.journal.fence("probe")
        except StorageError:
            return
        time.sleep(0.05)
    raise AssertionError(f"{ws.what} never learnt it lost the lease")


def close_fenced(ws, fh) -> None:
    """Once ``ws``'s renewal thread was refused, ``fh``'s close fails with EIO."""
    wait_fenced(ws)
    with pytest.raises(StorageError, match=f"no longer holds the writer lease of workspace {ws.name!r}") as e:
        fh.close()
    assert e.value.errno == errno.EIO


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def catalog(tmp_path: Path, clock: Clock):
    store = SQLiteCatalogStore(tmp_path / "catalog.db", clock=clock)
    yield store
    store.close()


def test_a_second_node_is_refused_naming_the_holder_and_may_open_after_the_first_closes(
    tmp_path: Path, catalog: SQLiteCatalogStore
) -> None:
    (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
    ws = open_workspace("shared", config_a, stores_a, lease=catalog)
    try:
        with pytest.raises(
            Conflict, match=r"workspace 'shared' is open for writing elsewhere: host \S+ pid \d+"
        ) as e:
            open_workspace("shared", config_b, stores_b, lease=catalog)
        assert "lapses in" in e.value.message and e.value.details["epoch"] == 1
        write(ws, "out.txt", b"node a")
    finally:
        ws.close()
    ws_b = open_workspace("shared", config_b, stores_b, lease=catalog)  # released at close
    try:
        assert ws_b.journal.fence("probe") is None
    finally:
        ws_b.close()
    assert only_copy(tmp_path / "objects" / "workspaces" / "shared", "out.txt") == b"node a"
    stores_a.close()
    stores_b.close()


def test_a_holder_whose_lapsed_lease_was_taken_over_refuses_closes_and_pushes_nothing(
    tmp_path: Path, catalog: SQLiteCatalogStore, clock: Clock
) -> None:
    """Node a stops renewing in time (the catalog's clock jumps past its ttl); node b takes the
    workspace over. Node a's next renewal is refused: its closes, fsyncs and flushes fail
    with EIO and its file never reaches the bucket over node b's."""
    (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
    ws_a = open_workspace("shared", config_a, stores_a, lease=catalog, lease_ttl=LEASE_TTL)
    write(ws_a, "early.txt", b"acknowledged before the takeover")
    clock.now += 60  # a's lease lapsed in the catalog's eyes
    ws_b = open_workspace("shared", config_b, stores_b, lease=catalog)
    try:
        write(ws_b, "out.txt", b"node b")
        ws_b.flush()
        fh = ws_a.open("out.txt", create=True, truncate=True)
        fh.write(0, b"node a, after losing the lease")
        close_fenced(ws_a, fh)
        with pytest.raises(StorageError, match="writer lease"):
            ws_a.flush()
        with pytest.raises(StorageError, match="writer lease"):
            ws_a.close()
    finally:
        ws_b.close()
    assert only_copy(tmp_path / "objects" / "workspaces" / "shared", "out.txt") == b"node b"
    assert copies(tmp_path / "objects" / "workspaces" / "shared", "early.txt") == {}
    stores_a.close()
    stores_b.close()


def test_a_holder_that_cannot_renew_stops_acknowledging_before_its_lease_can_lapse(tmp_path: Path) -> None:
    """The leases stay locked (their SQLite file, ``catalog.db.leases``, held by a stalled
    writer; before leftovers22 any long commit of the catalog did it): every renewal fails
    with Busy. Once ``ttl - ttl/6`` passed since the last renewal, closes fail with EIO,
    before another node could take the lease."""
    import sqlite3

    store = SQLiteCatalogStore(tmp_path / "catalog.db", busy_timeout_ms=50)
    config, stores = node(tmp_path, "a")
    ws = open_workspace("shared", config, stores, lease=store, lease_ttl=0.6)
    blocker = sqlite3.connect(tmp_path / "catalog.db.leases", isolation_level=None)
    try:
        fh = ws.open("f", create=True, truncate=True)
        fh.write(0, b"written while the catalog is locked")
        blocker.execute("BEGIN EXCLUSIVE")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                ws.journal.fence("probe")
            except StorageError as exc:
                assert "not renewed for" in exc.message
                break
            time.sleep(0.05)
        with pytest.raises(StorageError, match="no longer holds the writer lease") as e:
            fh.close()
        assert e.value.errno == errno.EIO
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        with pytest.raises(StorageError):
            ws.close()
        stores.close()
        store.close()
    assert copies(tmp_path / "objects" / "workspaces" / "shared", "f") == {}


def test_a_flush_from_another_node_is_refused_while_the_workspace_is_leased_elsewhere(
    tmp_path: Path, catalog: SQLiteCatalogStore
) -> None:
    """``datahub cache flush`` on node b opens b's journal of the workspace to push it: under
    the lease, as every writer's open, so a node that lost the workspace never pushes over
    the holder's files (before: it opened without the lease and pushed)."""
    (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
    ws_b = open_workspace("shared", config_b, stores_b, lease=catalog)  # b once held it
    ws_b.close()
    ws = open_workspace("shared", config_a, stores_a, lease=catalog)
    try:
        with pytest.raises(Conflict, match=r"workspace 'shared' is open for writing elsewhere"):
            flush_workspace("shared", config_b, stores_b, lease=catalog)
    finally:
        ws.close()
    assert flush_workspace("shared", config_b, stores_b, lease=catalog).errors == []
    stores_a.close()
    stores_b.close()


def test_over_the_api_a_workspace_is_leased_by_the_writers_of_its_commit_target(tmp_path: Path) -> None:
    """lease15: the mount names its ``--commit-to`` in the lease, and a server lets only that
    dataset's writers take it. A token with no role is refused naming no target (the workspace
    is then a global admin's) and after bob's node used the name; bob's ``datahub cache flush``
    (naming no target) is allowed on the target his lease recorded."""
    from datahub.api.tokens import issue_token
    from datahub.catalog.http_store import HttpCatalogStore
    from datahub.errors import AccessDenied
    from tests.catalog.remote import serve

    server, backing, _admin = serve(tmp_path / "server")
    (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
    clients = []
    try:
        backing.create_dataset("pets", owner="owner", acl={"bob": "writer"})
        as_bob, as_eve = (
            HttpCatalogStore(server.url, token=issue_token(backing.store, p)[0]) for p in ("bob", "eve")
        )
        clients += [as_bob, as_eve]
        with pytest.raises(AccessDenied, match="names no commit target"):
            open_workspace("training", config_b, stores_b, lease=as_eve)
        ws = open_workspace("training", config_a, stores_a, lease=as_bob, commit_to="pets")
        try:
            write(ws, "model.pt", b"weights")
        finally:
            ws.close()
        assert backing.store.lease("training").dataset == "pets"
        with pytest.raises(AccessDenied, match="commits into a dataset 'eve' may not write"):
            open_workspace("training", config_b, stores_b, lease=as_eve)
        assert flush_workspace("training", config_a, stores_a, lease=as_bob) is not None
    finally:
        for client in clients:
            client.close()
        stores_a.close()
        stores_b.close()
        server.stop()
        backing.close()
    assert only_copy(tmp_path / "objects" / "workspaces" / "training", "model.pt") == b"weights"


def test_a_broken_lease_fences_its_live_holder_before_another_node_may_take_it(
    tmp_path: Path, catalog: SQLiteCatalogStore, clock: Clock
) -> None:
    """An admin breaks node a's lease while a is writing: a's next renewal is refused and it
    fences (its close fails with EIO, nothing of it is flushed), and node b is refused until
    the lease's own expiry, then takes it (lease15)."""
    (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
    ws_a = open_workspace("shared", config_a, stores_a, lease=catalog, lease_ttl=LEASE_TTL, commit_to="pets")
    fh = ws_a.open("late.txt", create=True)
    fh.write(0, b"node a, after the break")
    assert catalog.break_lease("shared").dataset == "pets"
    with pytest.raises(Conflict, match="broken: it cannot be renewed"):
        open_workspace("shared", config_b, stores_b, lease=catalog)
    close_fenced(ws_a, fh)
    with pytest.raises(StorageError, match="writer lease"):
        ws_a.close()
    clock.now += 60  # the broken lease's expiry passed
    ws_b = open_workspace("shared", config_b, stores_b, lease=catalog)
    ws_b.close()
    assert catalog.lease("shared").epoch == 2
    assert copies(tmp_path / "objects" / "workspaces" / "shared", "late.txt") == {}
    stores_a.close()
    stores_b.close()
