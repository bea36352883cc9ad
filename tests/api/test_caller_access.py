"""``GET /v1/datasets/{name}/access``: the caller's own principal and role on one dataset.

A client that writes later on someone else's behalf (the CSI node plugin commits a workspace
volume into its ``commitTo`` when the pod is gone) asks this before it takes the job, and the
server answers with the very rule its routes apply (owner, global admin, ``*``), so no client
repeats it. A dataset the caller may not read is the 404 of a missing one (promise 5).
"""

from __future__ import annotations

import pytest

from tests.api.conftest import Api


@pytest.mark.parametrize(
    ("who", "principal", "role"),
    [
        ("alice", "alice", "reader"),
        ("bob", "bob", "writer"),
        ("owner", "owner", "admin"),
        ("admin", "root", "admin"),  # a global admin token, named in no access list
    ],
)
def test_the_caller_learns_its_own_role(api: Api, who: str, principal: str, role: str) -> None:
    r = api.get("/v1/datasets/pets/access", who=who)
    assert r.status_code == 200, r.text
    assert r.json() == {"dataset": "pets", "principal": principal, "role": role}


def test_the_highest_of_its_own_grant_and_everyones(api: Api) -> None:
    api.catalog.update_dataset("pets", acl={"alice": "reader", "*": "writer"})
    assert api.get("/v1/datasets/pets/access", who="alice").json()["role"] == "writer"
    assert api.get("/v1/datasets/pets/access", who="eve").json() == {
        "dataset": "pets",
        "principal": "eve",
        "role": "writer",
    }


def test_a_dataset_hidden_from_the_caller_answers_as_a_missing_one(api: Api) -> None:
    hidden = api.get("/v1/datasets/pets/access", who="eve")
    missing = api.get("/v1/datasets/no-such/access", who="eve")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["code"] == "dataset_not_found"
    assert hidden.json()["error"]["message"].replace("pets", "X") == missing.json()["error"][
        "message"
    ].replace("no-such", "X")


def test_no_token_is_401(api: Api) -> None:
    assert api.client.get("/v1/datasets/pets/access").status_code == 401
