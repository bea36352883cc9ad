"""review17b's attack on lease16 from the writer's side: a node's token loses the writer role on
its workspace's commit target while files are acknowledged and not yet flushed.

Over a real ``datahub serve --auth`` (``tests.catalog.remote.serve``) and its HTTP catalog
store, as a node reaches it. The refused renewal (403) fences the node: no upload after it
lands in the objects bucket, nothing more is acknowledged, and its close frees the lease (it
is still its own), so another writer of the target takes the workspace at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.api.tokens import issue_token, revoke_token
from datahub.catalog.http_store import HttpCatalogStore
from datahub.errors import StorageError
from datahub.writeback import open_workspace
from datahub.writeback.lease import WriterLease
from tests.catalog.remote import serve
from tests.writeback.conftest import write
from tests.writeback.flushed import files
from tests.writeback.test_lease import node, wait_fenced

# Long enough that no renewal is missed on a loaded machine (with test_lease's 3 s, a renewal
# late by 2.5 s fenced the node for time before the 403 could: the message this test checks
# is the 403's); the renewal thread still asks every 3 s, so the fence comes within that.
ROLE_TTL = 9.0


def test_a_node_whose_role_is_revoked_mid_flush_uploads_nothing_more_and_frees_the_lease(
    tmp_path: Path,
) -> None:
    server, backing, _ = serve(tmp_path)
    stores = []
    try:
        backing.create_dataset("pets", owner="root", acl={"bob": "writer", "alice": "writer"})
        bob = HttpCatalogStore(server.url, issue_token(backing.store, "bob")[0])
        alice = HttpCatalogStore(server.url, issue_token(backing.store, "alice")[0])
        stores += [bob, alice]
        (config_a, stores_a), (config_b, stores_b) = node(tmp_path, "a"), node(tmp_path, "b")
        stores += [stores_a, stores_b]
        landed = tmp_path / "objects" / "workspaces" / "shared"
        ws_a = open_workspace("shared", config_a, stores_a, lease=bob, lease_ttl=ROLE_TTL, commit_to="pets")
        try:
            write(ws_a, "early.bin", b"flushed while bob may write")
            ws_a.flush()
            write(ws_a, "late.bin", b"acknowledged, not yet flushed" * 1000)
            backing.update_dataset("pets", acl={"alice": "writer"})  # bob's role revoked
            wait_fenced(ws_a)  # its next renewal is refused (403), not retried until the ttl ends
            with pytest.raises(StorageError, match="no longer write"):
                ws_a.flush()
            with pytest.raises(StorageError, match="no longer write"):
                write(ws_a, "after.bin", b"never acknowledged")
        finally:
            with pytest.raises(StorageError):  # the final flush is fenced; the journal keeps late.bin
                ws_a.close()
        assert files(landed) == ["early.bin"]
        assert backing.store.lease("shared").expires <= 0  # released at close: still bob's
        ws_b = open_workspace("shared", config_b, stores_b, lease=alice, commit_to="pets")  # at once
        try:
            assert backing.store.lease("shared").holder.endswith("[alice]")
        finally:
            ws_b.close()
        assert files(landed) == ["early.bin"]
    finally:
        for s in stores:
            s.close()
        server.stop()
        backing.close()


def test_a_node_whose_token_is_revoked_fences_at_its_next_renewal(tmp_path: Path) -> None:
    """``datahub token revoke`` of a node's token: its next renewal is 401. The token never
    comes back (the process was started with it), so the node should stop writing then, as it
    does for a 403, not on for most of its ttl, acknowledging and uploading what its token may
    no longer commit."""
    server, backing, _ = serve(tmp_path)
    store = None
    try:
        backing.create_dataset("pets", owner="root", acl={"bob": "writer"})
        token = issue_token(backing.store, "bob")[0]
        store = HttpCatalogStore(server.url, token)
        journal = tmp_path / "journal"
        journal.mkdir()
        lease = WriterLease(store, "training", "workspace 'training'", journal, dataset="pets")
        try:
            assert lease.renew()
            revoke_token(backing.store, token)
            assert not lease.renew()
            with pytest.raises(StorageError, match="no longer"):
                lease.check("close")
        finally:
            lease.release()
    finally:
        if store is not None:
            store.close()
        server.stop()
        backing.close()
