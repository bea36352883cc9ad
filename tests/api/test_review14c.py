"""review14c: the writer-lease route (/v1/remote/leases) called by a token of another tenant."""

from __future__ import annotations

import json
import uuid

from tests.api.conftest import Api

LEASE = "/v1/remote/leases/training"


def test_another_tenant_neither_learns_nor_frees_nor_renews_a_held_lease(api: Api) -> None:
    """bob holds workspace ``training``'s lease (committed into ``pets``); another writer of
    ``pets`` sees who holds it (host and principal), never the owner id; eve's token (no role)
    may not take it (lease15) and never sees the owner id, and her release or renewal with any
    other owner id (or the right epoch) changes nothing: bob renews and holds it still."""
    owner = uuid.uuid4().hex
    body = {"owner": owner, "holder": "host a pid 1", "ttl": 60, "dataset": "pets"}
    taken = api.post(LEASE, "bob", json=body)
    assert taken.status_code == 200, taken.text
    epoch = taken.json()["epoch"]
    held = api.post(LEASE, "owner", json={"owner": uuid.uuid4().hex, "holder": "host o", "ttl": 60})
    assert held.status_code == 409, held.text
    assert owner not in held.text and "[bob]" in held.text
    refused = api.post(LEASE, "eve", json={"owner": uuid.uuid4().hex, "holder": "host e", "ttl": 60})
    assert refused.status_code == 403, refused.text
    assert owner not in refused.text
    guess = uuid.uuid4().hex
    api.post(f"{LEASE}/release", "eve", json={"owner": guess, "epoch": epoch})
    stolen = api.post(f"{LEASE}/renew", "eve", json={"owner": guess, "epoch": epoch, "ttl": 3600})
    assert stolen.status_code == 409, stolen.text
    assert owner not in stolen.text
    renewed = api.post(f"{LEASE}/renew", "bob", json={"owner": owner, "epoch": epoch, "ttl": 60})
    assert renewed.status_code == 200 and renewed.json()["owner"] == owner
    again = api.post(LEASE, "eve", json={"owner": guess, "holder": "host e", "ttl": 60})
    assert again.status_code == 403 and owner not in json.dumps(again.json())


def test_a_token_with_no_role_cannot_hold_another_tenants_workspace(api: Api) -> None:
    """eve has no role on any dataset. She takes the lease of the workspace bob's pods write
    (``training``, committed into ``pets`` where bob is a writer) before bob's node opens it,
    ttl 3600, and renews it: bob's node is refused (409) for as long as she keeps renewing.
    A lease should be taken only by a caller who may write what the workspace writes."""
    squat = api.post(LEASE, "eve", json={"owner": uuid.uuid4().hex, "holder": "host e", "ttl": 3600})
    bob = api.post(LEASE, "bob", json={"owner": uuid.uuid4().hex, "holder": "node a pid 1", "ttl": 30})
    assert squat.status_code == 403 or bob.status_code == 200, (squat.text, bob.text)
