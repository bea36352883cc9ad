"""Who may take a workspace's writer lease over the API (/v1/remote/leases): a caller who may
write its commit target, which the lease keeps; admins for a workspace with none, and for
breaking a lease (lease15; review14c's squat is tests/api/test_review14c.py)."""

from __future__ import annotations

import time
import uuid

from datahub.api.tokens import issue_token
from tests.api.conftest import Api

LEASE = "/v1/remote/leases/training"


def take(api: Api, who: str, dataset: str = "", ttl: float = 60, owner: str = "") -> tuple[int, dict, str]:
    body = {"owner": owner or uuid.uuid4().hex, "holder": f"host of {who}", "ttl": ttl}
    if dataset:
        body["dataset"] = dataset
    r = api.post(LEASE, who, json=body)
    return r.status_code, r.json() if r.status_code == 200 else {}, r.text


def test_a_writer_of_the_commit_target_takes_the_lease_and_keeps_it_the_tenants(api: Api) -> None:
    """bob (writer on ``pets``) takes ``training`` naming ``pets``; a reader, a token with no role
    (whatever target she names, her own dataset too) and any non-admin naming no target are
    refused, before and after bob releases: the name stays ``pets``' writers'."""
    code, bob, text = take(api, "bob", "pets")
    assert code == 200 and bob["dataset"] == "pets" and bob["holder"] == "host of bob [bob]", text
    assert api.post("/v1/datasets", "eve", json={"name": "eve-out"}).status_code == 201
    for _ in range(2):
        assert take(api, "alice", "pets")[0] == 403  # a reader of pets
        code, _, text = take(api, "eve", "pets")
        # hidden, as everywhere: a missing dataset's code; the message names the grant, not "create it"
        assert (
            code == 404
            and '"dataset_not_found"' in text
            and "'pets' is missing or not visible to 'eve'" in text
        )
        code, _, text = take(api, "eve", "eve-out")
        assert code == 403 and "commits into a dataset 'eve' may not write" in text, text
        assert "pets" not in text  # a dataset she may not read is never named to her
        code, _, text = take(api, "eve")
        assert code == 403 and "'eve' may not write" in text, text
        api.post(f"{LEASE}/release", "bob", json={"owner": bob["owner"], "epoch": bob["epoch"]})
    code, again, text = take(api, "bob", owner=bob["owner"])  # naming none: the lease's target
    assert code == 200 and (again["epoch"], again["dataset"]) == (1, "pets"), text
    code, _, text = take(api, "bob", "newer-outputs")  # held by bob's other node: 409, not 403
    assert code == 409 and "open for writing elsewhere" in text


def test_a_workspace_with_no_commit_target_is_an_admins_to_lease_over_the_api(api: Api) -> None:
    code, _, text = take(api, "bob")
    assert code == 403 and "names no commit target" in text and "--commit-to" in text
    code, lease, text = take(api, "admin")
    assert code == 200 and lease["dataset"] == "" and lease["holder"].endswith("[root]"), text


def test_in_local_mode_the_local_user_takes_any_workspace_lease(api: Api) -> None:
    api.config.api.local_mode = True
    body = {"owner": uuid.uuid4().hex, "holder": "laptop", "ttl": 30}
    r = api.client.post("/v1/remote/leases/scratch", json=body)
    assert r.status_code == 200 and r.json()["holder"] == "laptop [local]", r.text


def test_a_replacement_node_takes_a_lapsed_lease_with_a_token_that_may_commit_the_workspace(api: Api) -> None:
    """bob's node dies holding the lease; the replacement node's own token (csi-node, writer on
    ``pets``, as its commit at unpublish needs) takes it once it lapses, at the next epoch,
    naming no target (``finish_workspace`` of a supervisor, ``datahub cache flush``); the dead
    node's renewal is refused."""
    api.tokens["csi-node"] = issue_token(api.catalog.store, "csi-node")[0]
    api.catalog.update_dataset("pets", acl={"alice": "reader", "bob": "writer", "csi-node": "writer"})
    code, dead, text = take(api, "bob", "pets", ttl=0.2)
    assert code == 200, text
    deadline = time.monotonic() + 60
    while (taken := take(api, "csi-node"))[0] == 409:  # until the server's clock passes the expiry
        assert time.monotonic() < deadline, "the lease never lapsed"
        time.sleep(0.05)
    code, lease, text = taken
    assert code == 200 and (lease["epoch"], lease["dataset"]) == (2, "pets"), text
    assert lease["holder"].endswith("[csi-node]")
    renew = {"owner": dead["owner"], "epoch": 1, "ttl": 60}
    assert api.post(f"{LEASE}/renew", "bob", json=renew).status_code == 409


def test_a_global_admin_breaks_a_squatted_lease_for_the_tenant(api: Api) -> None:
    """eve takes a never-used name first, bound to her own dataset (first come, as dataset
    names are), and renews it for ever: bob is refused. A global admin breaks it naming the
    tenant's target, at once (eve writes nothing there): bob takes it at the next epoch, eve's
    renewal is refused and she may not take it again. Only a global admin may break (bob, the
    owner of pets: 403)."""
    assert api.post("/v1/datasets", "eve", json={"name": "eve-out"}).status_code == 201
    code, squat, text = take(api, "eve", "eve-out", ttl=3600)
    assert code == 200, text
    assert take(api, "bob", "pets")[0] == 403
    for who in ("bob", "owner", "eve"):
        r = api.post(f"{LEASE}/break", who, json={"dataset": "pets"})
        assert r.status_code == 403 and "only a global admin" in r.text, (who, r.text)
    r = api.post(f"{LEASE}/break", "admin", json={"dataset": "pets", "at_once": True})
    assert r.status_code == 200 and r.json()["dataset"] == "pets" and squat["owner"] not in r.text
    code, bob, text = take(api, "bob", "pets")
    assert code == 200 and bob["epoch"] == squat["epoch"] + 1, text
    renew = {"owner": squat["owner"], "epoch": squat["epoch"], "ttl": 3600}
    assert api.post(f"{LEASE}/renew", "eve", json=renew).status_code == 409
    assert take(api, "eve", "eve-out", owner=squat["owner"])[0] == 403
    assert api.post("/v1/remote/leases/never-used/break", "admin", json={}).status_code == 204


def test_a_break_without_at_once_leaves_a_live_writer_its_lease_until_it_has_fenced(api: Api) -> None:
    """By default a break only stops renewals: bob's node fences at its next renewal, and the
    lease is free at the expiry it had, never while bob may still be writing."""
    code, bob, text = take(api, "bob", "pets", ttl=600)
    assert code == 200, text
    r = api.post(f"{LEASE}/break", "admin", json={})
    assert r.status_code == 200 and (r.json()["expires"], r.json()["dataset"]) == (bob["expires"], "pets")
    renew = {"owner": bob["owner"], "epoch": bob["epoch"], "ttl": 600}
    assert api.post(f"{LEASE}/renew", "bob", json=renew).status_code == 409
    code, _, text = take(api, "bob", "pets")  # a writer of its target, refused only while it is held
    assert code == 409 and "broken: it cannot be renewed" in text, text
