"""review15a: attacks on this stop's writer-lease rule (lease15) and the access route
(csinode15) over the API.

What holds (kept as regressions): ``GET /v1/datasets/{name}/access`` for a dataset hidden from
the caller answers byte for byte what a missing one answers. What did not: the renew route
checks no role, and its 409 named the current holder (host, pid, principal) to any token."""

from __future__ import annotations

import uuid

from datahub.catalog.leases import Lease, decide
from datahub.errors import Conflict
from tests.api.conftest import Api

LEASE = "/v1/remote/leases/training"


def test_the_access_route_answers_a_hidden_dataset_as_a_missing_one_byte_for_byte(api: Api) -> None:
    """eve holds no role on ``pets``: its access answer is the one of ``pxts``, which does not
    exist (same length, so Content-Length matches too): status, every header, the body with
    the name swapped."""
    hidden = api.get("/v1/datasets/pets/access", "eve")
    missing = api.get("/v1/datasets/pxts/access", "eve")
    assert hidden.status_code == missing.status_code == 404, hidden.text
    assert hidden.content.replace(b"pets", b"pxts") == missing.content
    assert sorted(hidden.headers.items()) == sorted(missing.headers.items())
    # a reader learns her role, and only the server's rule decides it
    mine = api.get("/v1/datasets/pets/access", "alice")
    assert mine.status_code == 200 and mine.json() == {
        "dataset": "pets",
        "principal": "alice",
        "role": "reader",
    }


def test_a_renewal_by_a_token_with_no_role_learns_nothing_of_the_holder(api: Api) -> None:
    """bob (writer on ``pets``) holds ``training``. eve, with no role anywhere, may not take the
    lease, and the take's refusal says nothing of who holds it. Her renewal with a made-up
    owner id was the 409 of a lost lease, naming bob's host, pid and principal ("host of bob
    [bob] holds it now (epoch 1)"): what the take's role check keeps from her. It must say no
    more than a renewal of a name nobody ever leased."""
    body = {"owner": uuid.uuid4().hex, "holder": "host of bob", "ttl": 60, "dataset": "pets"}
    taken = api.post(LEASE, "bob", json=body)
    assert taken.status_code == 200, taken.text
    refused = api.post(LEASE, "eve", json={**body, "owner": uuid.uuid4().hex, "holder": "eve"})
    assert refused.status_code in (403, 404) and "bob" not in refused.text, refused.text

    guess = {"owner": "not-bobs", "epoch": 1, "ttl": 60}
    held = api.post(f"{LEASE}/renew", "eve", json=guess)
    never = api.post("/v1/remote/leases/trainixg/renew", "eve", json=guess)
    assert held.status_code == never.status_code == 409, held.text
    assert "bob" not in held.text and "host of" not in held.text, held.text
    assert held.content.replace(b"training", b"trainixg") == never.content

    # bob's own node, whose lease was taken over, still learns who holds it now
    api.catalog.store.break_lease("training", at_once=True)
    other = {"owner": uuid.uuid4().hex, "holder": "second node", "ttl": 60}
    assert api.post(LEASE, "bob", json=other).status_code == 200
    lost = api.post(f"{LEASE}/renew", "bob", json={"owner": body["owner"], "epoch": 1, "ttl": 60})
    assert lost.status_code == 409 and "second node [bob] holds it now" in lost.text, lost.text


def test_a_take_naming_a_hidden_bucket_snapshot_answers_as_a_missing_one(api: Api) -> None:
    """Only a global admin may create a dataset named like a bucket snapshot
    (``s3.<bucket>.<prefix>``), so ``POST /v1/datasets`` answers eve the same 403 whether one
    exists or not. A lease take naming one answered 404 when it existed (hidden from her) and
    403 when it did not: an oracle for which buckets the platform's mounts have recorded."""
    api.catalog.create_dataset("s3.team-b-raw.images", owner="root")
    hidden = api.post(
        LEASE, "eve", json={"owner": "o1", "holder": "e", "ttl": 30, "dataset": "s3.team-b-raw.images"}
    )
    missing = api.post(
        LEASE, "eve", json={"owner": "o1", "holder": "e", "ttl": 30, "dataset": "s3.team-x-raw.images"}
    )
    assert hidden.status_code == missing.status_code == 403, (hidden.text, missing.text)
    assert hidden.content.replace(b"team-b", b"team-x") == missing.content
    assert sorted(hidden.headers.items()) == sorted(missing.headers.items())
    # the dataset routes agree: create is the same 403, reading it the same 404
    for name in ("s3.team-b-raw.images", "s3.team-x-raw.images"):
        assert api.post("/v1/datasets", "eve", json={"name": name}).status_code == 403
        assert api.get(f"/v1/datasets/{name}/access", "eve").status_code == 404


def test_a_target_changed_under_a_take_is_not_named_to_the_taker() -> None:
    """The API checks the caller's role on the lease's target, then takes it; if another take
    bound the workspace to another dataset in between, ``decide`` refuses (Conflict). That
    dataset was never checked against this caller, who may not read it: the refusal must not
    name it (it said "now secret-set")."""
    current = Lease("training", "o1", "node [carol]", 1, 0.0, "secret-set")
    try:
        decide(current, "training", "o2", "node [eve]", 30.0, 10.0, "eve-out", bound="")
    except Conflict as exc:
        assert "secret-set" not in exc.message and "secret-set" not in str(exc.details), exc.message
    else:
        raise AssertionError("a take whose checked target changed went through")


def test_an_admins_workspace_with_no_commit_target_is_not_first_come_after_its_release(api: Api) -> None:
    """docs/api.md: a workspace with no commit target is a global admin's to lease over the
    API. The admin's node mounts ``scratch`` with no --commit-to, then unmounts (release: the
    lease stays, bound to no target). eve (no role anywhere) creates ``eve-out`` and takes
    ``scratch`` naming it: 200, the name is hers (she renews it for ever, review14c's squat),
    the admin's node is refused 409 meanwhile, and a break naming no target keeps eve's."""
    mine = {"owner": uuid.uuid4().hex, "holder": "admin node", "ttl": 60}
    taken = api.post("/v1/remote/leases/scratch", "admin", json=mine)
    assert taken.status_code == 200 and taken.json()["dataset"] == "", taken.text
    release = {"owner": mine["owner"], "epoch": taken.json()["epoch"]}
    assert api.post("/v1/remote/leases/scratch/release", "admin", json=release).status_code == 204
    assert api.post("/v1/datasets", "eve", json={"name": "eve-out"}).status_code == 201

    squat = {"owner": uuid.uuid4().hex, "holder": "eve", "ttl": 3600, "dataset": "eve-out"}
    r = api.post("/v1/remote/leases/scratch", "eve", json=squat)
    assert r.status_code == 403 and "eve-out" not in api.catalog.store.lease("scratch").dataset, r.text


def test_a_derive_into_a_hidden_bucket_snapshot_answers_as_into_a_missing_one(api: Api) -> None:
    """The derive route has the lease take's oracle: alice, a reader of ``pets``, derives into
    ``s3.<bucket>.<prefix>`` names; an existing (hidden) one answered 404, a missing one 403."""
    api.catalog.create_dataset("s3.team-b-raw.images", owner="root")
    answers = [
        api.post(
            "/v1/datasets/pets/versions/1/derive",
            "alice",
            json={"where": "labels.class=cat", "to_dataset": name},
        )
        for name in ("s3.team-b-raw.images", "s3.team-x-raw.images")
    ]
    assert answers[0].status_code == answers[1].status_code == 403, [a.text for a in answers]
    assert answers[0].content.replace(b"team-b", b"team-x") == answers[1].content
