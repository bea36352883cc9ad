"""lease16: renewing a workspace's writer lease over the API needs what taking it needs.

The owner id (a random 128-bit id in the holder's journal directory) proves the caller is the
holder; the writer role on the lease's commit target proves it may still write the workspace.
A writer whose role was revoked kept the workspace for ever by renewing (the route checked
no role). Releasing only gives the lease up, so it needs the owner id alone. Leases taken
before schema 7 name no target: their refusals name the command that binds them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from datahub.catalog.http_store import HttpCatalogStore
from datahub.errors import StorageError
from datahub.writeback.lease import WriterLease
from tests.api.conftest import Api
from tests.catalog.remote import serve

LEASE = "/v1/remote/leases/training"


def take(api: Api, who: str, dataset: str = "pets", ttl: float = 60) -> dict:
    body = {"owner": uuid.uuid4().hex, "holder": f"host of {who}", "ttl": ttl, "dataset": dataset}
    r = api.post(LEASE, who, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def renew(api: Api, who: str, lease: dict, ttl: float = 600):
    return api.post(
        f"{LEASE}/renew", who, json={"owner": lease["owner"], "epoch": lease["epoch"], "ttl": ttl}
    )


def test_a_writer_whose_role_was_revoked_cannot_keep_the_workspace_by_renewing(api: Api) -> None:
    """bob takes ``training`` (commit target ``pets``) and renews it; pets' owner revokes bob.
    His next renewal is 403 saying why (the lease is not extended, so his node fences), while
    a writer's renewal is 200. Made a reader, the same; with the role back, he renews again."""
    bob = take(api, "bob")
    r = renew(api, "bob", bob)
    assert r.status_code == 200, r.text
    kept = r.json()["expires"]
    for acl in ({"alice": "reader"}, {"alice": "reader", "bob": "reader"}):
        api.catalog.update_dataset("pets", acl=acl)
        r = renew(api, "bob", bob)
        assert r.status_code == 403 and '"access_denied"' in r.text, r.text
        assert "no longer write" in r.text and "not renewed" in r.text, r.text
        assert "pets" not in r.text  # a dataset he may not read any more is not named to him
        assert api.catalog.store.lease("training").expires == kept  # not extended
    api.catalog.update_dataset("pets", acl={"alice": "reader", "bob": "writer"})
    r = renew(api, "bob", bob)
    assert r.status_code == 200 and r.json()["epoch"] == bob["epoch"], r.text


def test_a_leaked_owner_id_does_not_let_a_token_with_no_role_renew(api: Api) -> None:
    """The owner id is the holder's secret, but it is a bearer secret: eve, who learned bob's
    (a node she once had a shell on), renewed his lease with her own token. Now she needs the
    writer role too: 403, the lease is not extended."""
    bob = take(api, "bob", ttl=30)
    r = renew(api, "eve", bob, ttl=3600)
    assert r.status_code == 403 and "'eve' may no longer write" in r.text, r.text
    assert api.catalog.store.lease("training").expires <= bob["expires"] + 1


def test_releasing_needs_only_the_owner_id_and_frees_a_revoked_writers_lease(api: Api) -> None:
    """Release gives the lease up, so a holder whose role was revoked may still release it (its
    unmount frees the name for the target's writers at once); a caller without the owner id
    releases nothing (204 either way: it learns nothing)."""
    bob = take(api, "bob")
    stranger = {"owner": uuid.uuid4().hex, "epoch": bob["epoch"]}
    assert api.post(f"{LEASE}/release", "eve", json=stranger).status_code == 204
    assert api.catalog.store.lease("training").expires == bob["expires"]  # still bob's
    api.catalog.update_dataset("pets", acl={"alice": "reader"})
    mine = {"owner": bob["owner"], "epoch": bob["epoch"]}
    assert api.post(f"{LEASE}/release", "bob", json=mine).status_code == 204
    assert api.catalog.store.lease("training").expires <= 0


def test_a_lease_from_before_schema_7_names_the_command_that_binds_it(api: Api) -> None:
    """A lease written before schema 7 names no commit target. Its holder's renewal (bob's node,
    mounted before the upgrade) and a writer's take are refused, both naming the CLI command a
    global admin binds it with; once bound to ``pets`` (the break's own rule: at once only for
    a holder known to write nothing), bob takes it."""
    owner = uuid.uuid4().hex
    old = api.catalog.store.acquire_lease("training", owner, "host h pid 7", 600)
    assert old.dataset == ""
    bind = "datahub lease break training --dataset"
    r = api.post(f"{LEASE}/renew", "bob", json={"owner": owner, "epoch": old.epoch, "ttl": 60})
    assert r.status_code == 403 and bind in r.text and "no commit target" in r.text, r.text
    r = api.post(LEASE, "bob", json={"owner": uuid.uuid4().hex, "holder": "n", "ttl": 60, "dataset": "pets"})
    assert r.status_code == 403 and bind in r.text, r.text
    r = api.post(f"{LEASE}/break", "admin", json={"dataset": "pets", "at_once": True})
    assert r.status_code == 200 and r.json()["dataset"] == "pets", r.text
    assert take(api, "bob")["epoch"] == 2


def test_a_lease_is_shown_without_its_owner_id_to_who_may_take_it_and_to_no_one_else(api: Api) -> None:
    """``GET /v1/remote/leases/{name}`` (``datahub lease show``): a global admin and the commit
    target's writers see the holder, epoch, expiry, target and state, never the owner id;
    to a reader or a token with no role it is the 404 of a name nobody leased, byte for byte."""
    bob = take(api, "bob")
    for who in ("admin", "bob"):
        r = api.get(LEASE, who)
        assert r.status_code == 200 and bob["owner"] not in r.text, r.text
        shown = r.json()
        assert (shown["holder"], shown["epoch"], shown["dataset"], shown["state"]) == (
            "host of bob [bob]",
            1,
            "pets",
            "held",
        )
    for who in ("alice", "eve"):
        held = api.get(LEASE, who)
        never = api.get("/v1/remote/leases/trainixg", who)
        assert held.status_code == never.status_code == 404, held.text
        assert held.content.replace(b"training", b"trainixg") == never.content
    api.post(f"{LEASE}/break", "admin", json={})
    assert api.get(LEASE, "bob").json()["state"] == "broken"
    api.post(f"{LEASE}/break", "admin", json={"at_once": True})
    assert api.get(LEASE, "bob").json()["state"] == "free"
    assert api.get("/v1/remote/leases/trainixg", "admin").status_code == 404


def test_a_node_whose_token_lost_the_writer_role_fences_at_its_next_renewal(tmp_path: Path) -> None:
    """End to end over a real server: bob's node holds ``training`` (commit target ``pets``);
    pets' owner revokes bob. The node's next renewal is refused for good (not retried as a
    network failure until the ttl runs out), every write after it is refused, saying why, and
    its close releases the lease (still its own), so pets' writers take it at once."""
    server, backing, _ = serve(tmp_path)
    store = None
    try:
        backing.create_dataset("pets", owner="root", acl={"bob": "writer"})
        store = HttpCatalogStore(server.url, issue_token(backing.store, "bob")[0])
        journal = tmp_path / "journal"
        journal.mkdir()
        lease = WriterLease(store, "training", "workspace 'training'", journal, dataset="pets")
        try:
            assert lease.renew()
            backing.update_dataset("pets", acl={})
            assert not lease.renew()
            with pytest.raises(StorageError, match="no longer write the dataset it commits into"):
                lease.check("close")
        finally:
            lease.release()
        assert backing.store.lease("training").expires <= 0  # still its own: released at close
    finally:
        if store is not None:
            store.close()
        server.stop()
        backing.close()


def test_a_target_created_by_another_tenant_first_stops_the_renewals_of_its_workspace(api: Api) -> None:
    """docs/api.md, "What is left": bob's workspace commits into ``newds``, which his first commit
    would create. eve creates ``newds`` first (dataset names are first come): bob may not write
    it, so his next renewal is refused (his node fences; before, it wrote on until its commit
    was refused), and the refusal does not name her dataset."""
    bob = take(api, "bob", "newds")
    assert renew(api, "bob", bob).status_code == 200
    assert api.post("/v1/datasets", "eve", json={"name": "newds"}).status_code == 201
    r = renew(api, "bob", bob)
    assert r.status_code == 403 and "may no longer write" in r.text and "newds" not in r.text, r.text


def test_a_tenant_refused_by_a_squatted_name_is_told_the_command_that_frees_it(api: Api) -> None:
    """eve binds the never-leased ``training`` to a dataset of her own first (first come:
    docs/api.md says why); bob's take is refused naming the global admin's break command."""
    assert api.post("/v1/datasets", "eve", json={"name": "eve-out"}).status_code == 201
    take(api, "eve", "eve-out", ttl=3600)
    r = api.post(LEASE, "bob", json={"owner": uuid.uuid4().hex, "holder": "n", "ttl": 60, "dataset": "pets"})
    assert r.status_code == 403 and "datahub lease break training --dataset TARGET --at-once" in r.text, (
        r.text
    )
    assert "eve-out" not in r.text
