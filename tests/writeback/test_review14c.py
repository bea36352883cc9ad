"""review14c: adversarial checks of the workspace writer lease (lease14).

Two "nodes" are two homes sharing one SQLite catalog and one objects directory, as in
``test_lease.py``, whose helpers these reuse."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import Conflict, DatahubError, StorageError
from datahub.writeback import open_workspace
from tests.writeback.conftest import write
from tests.writeback.flushed import only_copy
from tests.writeback.test_lease import LEASE_TTL, Clock, catalog, clock, node

__all__ = ["catalog", "clock"]  # fixtures


_HOLDER = """
import sys, time
from pathlib import Path
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.writeback import open_workspace
from tests.writeback.test_lease import node
tmp = Path(sys.argv[1])
config, stores = node(tmp, "a")
ws = open_workspace("shared", config, stores, lease=SQLiteCatalogStore(tmp / "catalog.db"))
print(ws.flusher is not None, flush=True)
time.sleep(600)
"""


def test_a_holder_killed_and_restarted_on_its_node_takes_its_lease_back_and_nobody_else_steals_it(
    tmp_path: Path, catalog: SQLiteCatalogStore
) -> None:
    """A holder killed -9 (its lease never released, live for its ttl) and reopened on the
    same node (same journal, same ``lease-owner``) is let in at once at the same epoch;
    a second opener of that journal while it runs is refused by the flock, not let in as
    the lease's owner; another node is refused by the lease, which the restart kept."""
    (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path)],
        stdout=subprocess.PIPE, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"True"
    finally:
        holder.kill()  # SIGKILL
        holder.wait()
    with pytest.raises(Conflict, match="open for writing elsewhere"):
        open_workspace("shared", config_b, stores_b, lease=catalog)
    again = open_workspace("shared", config_a, stores_a, lease=catalog)
    try:
        assert again.journal.fence("probe") is None
        with pytest.raises(Conflict, match="open for writing elsewhere"):
            open_workspace("shared", config_b, stores_b, lease=catalog)
        with pytest.raises(DatahubError) as same_node:
            open_workspace("shared", config_a, stores_a, lease=catalog)
        assert "elsewhere" not in same_node.value.message  # the journal's flock refused it
    finally:
        again.close()
    stores_a.close()
    stores_b.close()


def test_an_upload_in_flight_when_the_lease_is_taken_over_does_not_replace_the_new_holders_file(
    tmp_path: Path, catalog: SQLiteCatalogStore, clock: Clock
) -> None:
    """Node a starts flushing a file (its fence check passes); its upload is slow (a big file,
    a slow link: held here at the store's put). Meanwhile a's lease lapses at the catalog
    (a partition from the catalog only), node b takes the workspace over, writes the same
    path and flushes it. When a's upload completes, the bucket must still hold b's
    acknowledged bytes: a fenced holder pushes nothing over a new holder's files
    (docs/writeback.md, "One writer")."""
    (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
    ws_a = open_workspace("shared", config_a, stores_a, lease=catalog, lease_ttl=LEASE_TTL)
    write(ws_a, "model.bin", b"node a's older bytes")
    origin = ws_a.flusher.origin
    started, go = threading.Event(), threading.Event()
    real_put = origin.put

    def slow_put(*args, **kwargs):  # the real put, after a pause standing for a slow upload
        started.set()
        assert go.wait(60)
        return real_put(*args, **kwargs)

    origin.put = slow_put

    def flush_a() -> None:
        try:
            ws_a.flush()
        except StorageError:
            pass  # recording the upload is fenced; the bytes are in the bucket by then

    flusher = threading.Thread(target=flush_a)
    flusher.start()
    try:
        assert started.wait(60), "node a's upload never started"
        clock.now += 60  # a's lease lapsed at the catalog while its upload runs
        ws_b = open_workspace("shared", config_b, stores_b, lease=catalog)
        try:
            write(ws_b, "model.bin", b"node b's acknowledged bytes")
            ws_b.flush()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # a's renewal thread learns it lost the lease
                try:
                    ws_a.journal.fence("probe")
                except StorageError:
                    break
                time.sleep(0.05)
        finally:
            go.set()
            flusher.join(60)
            ws_b.close()
    finally:
        go.set()
        origin.put = real_put
        try:
            ws_a.close()
        except StorageError:
            pass  # fenced: expected
        stores_a.close()
        stores_b.close()
    held = only_copy(tmp_path / "objects" / "workspaces" / "shared", "model.bin")
    assert held == b"node b's acknowledged bytes"
