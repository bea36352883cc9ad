"""review17b's attacks on the caller-facing routes of lease16 and on every read route that
takes a dataset or lease name (promise 5): a dataset the caller may not read must look exactly
like a missing one (docs/api.md), and a lease must be shown, renewed or broken only by who may.
"""

from __future__ import annotations

import re
import uuid

import pytest
from fastapi.routing import APIRoute

from datahub.api.routes import ROUTERS
from tests.api.conftest import Api

LEASE = "/v1/remote/leases/training"

# the values a read route's path and query parameters get: a version of ``pets`` that exists
PATH_VALUES = {"ref": "1", "seq": "1", "key": "img/001.jpg", "tag": "golden"}
QUERIES = {"seq": "1", "a": "0", "b": "1", "from": "1", "to": "1"}


def _read_routes() -> list[APIRoute]:
    """Every GET route of the API (public and remote store) whose path names a dataset."""
    return [
        r
        for router in ROUTERS
        for r in router.routes
        if isinstance(r, APIRoute) and "GET" in r.methods and "{name}" in r.path and "leases" not in r.path
    ]


def _url(route: APIRoute, name: str) -> str:
    path = re.sub(r"\{(\w+)(?::path)?\}", lambda m: name if m[1] == "name" else PATH_VALUES[m[1]], route.path)
    return path + "?" + "&".join(f"{k}={v}" for k, v in QUERIES.items())


def test_every_read_route_answers_a_hidden_dataset_as_a_missing_one_byte_for_byte(api: Api) -> None:
    """eve holds no role on ``pets``: each GET route naming it answers her what it answers for
    ``pexs``, which does not exist (status and body, the name aside); the premise (each route
    serves pets to its reader) is checked too, so a route failing for everyone proves nothing."""
    api.catalog.tag("pets", "golden", 1)
    routes = _read_routes()
    assert len(routes) >= 12, [r.path for r in routes]
    for route in routes:
        url = _url(route, "pets")
        served = api.get(url, "alice")
        assert served.status_code == 200, (route.path, served.text)
        hidden, missing = api.get(url, "eve"), api.get(_url(route, "pexs"), "eve")
        assert hidden.status_code == missing.status_code == 404, (route.path, hidden.text)
        assert hidden.content.replace(b"pets", b"pexs") == missing.content, route.path
        assert hidden.headers.get("etag") == missing.headers.get("etag"), route.path


def test_the_batch_record_lookup_answers_a_hidden_dataset_as_a_missing_one(api: Api) -> None:
    body = {"seq": 1, "keys": ["img/001.jpg"]}
    assert api.post("/v1/remote/datasets/pets/records/get", "alice", json=body).status_code == 200
    hidden = api.post("/v1/remote/datasets/pets/records/get", "eve", json=body)
    missing = api.post("/v1/remote/datasets/pexs/records/get", "eve", json=body)
    assert hidden.status_code == missing.status_code == 404, hidden.text
    assert hidden.content.replace(b"pets", b"pexs") == missing.content


def _take(api: Api, who: str, dataset: str = "pets", holder: str = "host h pid 1") -> dict:
    body = {"owner": uuid.uuid4().hex, "holder": holder, "ttl": 60, "dataset": dataset}
    r = api.post(LEASE, who, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_writer_of_one_dataset_cannot_break_or_rebind_another_datasets_lease(api: Api) -> None:
    """bob writes ``pets``; eve owns ``eve-out``. Neither may break the other's lease, naming
    its own dataset or none (403: only a global admin breaks), and the lease is left as it was:
    its holder renews it."""
    assert api.post("/v1/datasets", "eve", json={"name": "eve-out"}).status_code == 201
    bob = _take(api, "bob")
    for who in ("eve", "bob", "owner"):
        for body in ({}, {"dataset": "eve-out"}, {"dataset": "eve-out", "at_once": True}):
            r = api.post(f"{LEASE}/break", who, json=body)
            assert r.status_code == 403 and "only a global admin" in r.text, (who, body, r.text)
    after = api.catalog.store.lease("training")
    assert (after.owner, after.dataset, after.epoch) == (bob["owner"], "pets", 1)
    r = api.post(f"{LEASE}/renew", "bob", json={"owner": bob["owner"], "epoch": 1, "ttl": 60})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "name",
    ["a/b", "..", ".", "a%2Fb", "%2e%2e", "training%00", "TRAINING", " training", "training%0A", "a" * 200],
)
def test_a_lease_name_that_is_a_path_or_has_odd_characters_reaches_no_lease(api: Api, name: str) -> None:
    """A name that is a path, another spelling of ``training`` or no workspace name at all
    shows, takes and breaks nothing: an error (4xx) that names no holder, and ``training``
    stays bob's."""
    bob = _take(api, "bob", holder="host of bob")
    url = f"/v1/remote/leases/{name}"
    for who in ("admin", "bob", "eve"):
        r = api.get(url, who)
        if r.status_code == 200 and "leases" in r.json():
            # "." is the collection itself once the client normalises the path: that is the
            # list route (lease17, paged by leasepage17), whose rule is that of GET /{name}: eve, who may not take
            # ``training``, is shown no holder; admin and bob may see it there
            assert name == "." and (who != "eve" or "host of bob" not in r.text), (who, r.text)
            continue
        assert 400 <= r.status_code < 500 and "host of bob" not in r.text, (who, r.status_code, r.text)
        body = {"owner": uuid.uuid4().hex, "holder": "x", "ttl": 60, "dataset": "pets"}
        r = api.post(url, who, json=body)
        assert r.status_code != 200 or r.json()["name"] != "training", r.text
        r = api.post(f"{url}/break", who, json={"at_once": True})
        assert r.status_code != 200 or r.json()["name"] != "training", r.text
    after = api.catalog.store.lease("training")
    assert (after.owner, after.epoch, after.expires) == (bob["owner"], 1, bob["expires"])


@pytest.mark.parametrize(
    "holder", ["host h pid 1\n[alice] holds it", "host h \x1b[2J\x1b[Hpid 1", "host\rh", "h\x00"]
)
def test_a_holder_with_control_characters_is_refused_before_it_reaches_anyone(api: Api, holder: str) -> None:
    """The holder is the taker's own text, shown to the next taker in its Conflict (a CLI's
    terminal, a node's log), by ``datahub lease show`` and in a refused renewal: a newline
    forged a line of it ("[alice] holds it"), an escape sequence rewrote an admin's terminal.
    A node's holder is ``host NAME pid N``: the take is refused (4xx), no lease is written."""
    body = {"owner": uuid.uuid4().hex, "holder": holder, "ttl": 60, "dataset": "pets"}
    r = api.post(LEASE, "bob", json=body)
    assert 400 <= r.status_code < 500, r.text
    assert api.catalog.store.lease("training") is None


def test_every_write_route_answers_a_hidden_dataset_as_a_missing_one_byte_for_byte(api: Api) -> None:
    """The same for the routes that change a dataset (commit, tags, derive, update, the remote
    store's): eve, who may not read ``pets``, gets what she gets for the missing ``pexs``,
    whatever the body; and ``pets`` is left as it was."""
    api.catalog.tag("pets", "golden", 1)
    routes = [
        (method, r)
        for router in ROUTERS
        for r in router.routes
        if isinstance(r, APIRoute) and "{name}" in r.path and "leases" not in r.path
        for method in sorted(r.methods - {"GET", "HEAD"})
    ]
    assert len(routes) >= 6, [r.path for _, r in routes]
    before = (api.catalog.get_dataset("pets"), [v.seq for v in api.catalog.log("pets")])
    for method, route in routes:
        for body in ({}, {"seq": 1}, {"where": "labels.class=cat"}):
            hidden = api.client.request(method, _url(route, "pets"), headers=api.as_("eve"), json=body)
            missing = api.client.request(method, _url(route, "pexs"), headers=api.as_("eve"), json=body)
            assert hidden.status_code == missing.status_code == 404, (method, route.path, hidden.text)
            assert hidden.content.replace(b"pets", b"pexs") == missing.content, (method, route.path)
    assert (api.catalog.get_dataset("pets"), [v.seq for v in api.catalog.log("pets")]) == before
