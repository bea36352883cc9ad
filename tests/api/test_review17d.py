"""review17d's attacks on lease17's ``GET /v1/remote/leases``: who sees which lease.

A workspace mounted with ``--commit-to`` a dataset its first commit creates (the usual way to
start one) has a lease bound to a target that does not exist yet. Any token may create that
name, so by the take's rule any token may take the lease once it lapses, and ``GET /{name}``
shows it to whoever asks for that name. The list showed it to every token too: a token with
no role anywhere (docs/api.md: "gets ``[]``") listed every such workspace, its holder's host,
pid and principal, and the name of the dataset it will create, without knowing any name.
"""

from __future__ import annotations

import uuid

from tests.api.conftest import Api


def _take(api: Api, name: str, who: str, dataset: str) -> None:
    body = {"owner": uuid.uuid4().hex, "holder": f"host {who}-node pid 7", "ttl": 600, "dataset": dataset}
    r = api.post(f"/v1/remote/leases/{name}", who, json=body)
    assert r.status_code == 200, r.text


def _listed(api: Api, who: str) -> list[str]:
    r = api.get("/v1/remote/leases", who)
    assert r.status_code == 200, r.text
    assert r.json()["next"] is None  # one page holds them all
    return [row["name"] for row in r.json()["leases"]]


def test_a_lease_bound_to_a_dataset_not_created_yet_is_listed_to_its_taker_and_admins_only(
    api: Api,
) -> None:
    """bob's workspace ``bobs-run`` commits into ``bob-results``, which its first commit will
    create; his ``train`` commits into pets (he is its writer). eve (no role anywhere) and alice
    (a reader of pets) list nothing; bob lists both of his; a global admin lists both. Before,
    eve and alice listed ``bobs-run``, naming bob's host and the dataset he is about to create."""
    _take(api, "bobs-run", "bob", "bob-results")
    _take(api, "train", "bob", "pets")
    assert _listed(api, "eve") == []  # before: ["bobs-run"]
    assert _listed(api, "alice") == []
    assert _listed(api, "bob") == ["bobs-run", "train"]
    assert _listed(api, "admin") == ["bobs-run", "train"]
    # by name it stays what the take's rule says: eve may take it once it lapses, so she sees it
    assert api.get("/v1/remote/leases/bobs-run", "eve").status_code == 200


def test_the_taker_of_a_lease_whose_target_another_created_does_not_list_it(api: Api) -> None:
    """bob's ``bobs-run`` commits into ``results``, not created yet; eve creates ``results``
    first (bob has no role on it). bob no longer lists the lease: it is bound to a dataset he
    may not read, whose existence the list must not tell him; eve, its owner, lists it."""
    _take(api, "bobs-run", "bob", "results")
    assert api.post("/v1/datasets", "eve", json={"name": "results"}).status_code == 201
    assert _listed(api, "bob") == []
    assert _listed(api, "eve") == ["bobs-run"]


PAGE = 1000  # the most rows one answer should hold (a suggestion: the fix picks its own)


def test_one_list_answers_a_bounded_page_whatever_the_number_of_leases(api: Api) -> None:
    """Leases taken by a token with no role anywhere, one per made-up name and target (the
    take's rule lets it: it may create those datasets; the first is taken over the API, the
    rest straight in the store, as the server would record them), more than one page of
    them: a global admin's list answers at most a page."""
    _take(api, "made-up-0000", "eve", "made-up-target-0000")
    for i in range(1, PAGE + 1):
        holder = "host eve-node pid 7 [eve]"
        api.catalog.store.acquire_lease(
            f"made-up-{i:04d}", uuid.uuid4().hex, holder, 600, f"made-up-target-{i:04d}"
        )
    r = api.get("/v1/remote/leases", "admin")
    assert r.status_code == 200, r.text
    assert len(r.json()["leases"]) <= PAGE
    assert r.json()["next"] is not None  # and the rest follows from there
