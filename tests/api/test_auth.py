"""Promise 5: tokens are required outside local mode; roles gate every dataset operation."""

from __future__ import annotations

import pytest

from datahub.api.tokens import hash_token, revoke_token
from tests.api.conftest import Api

COMMIT = {"changes": [{"op": "delete", "key": "img/000.jpg"}]}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwdw=="},
        {"Authorization": "Bearer dh_nope"},
    ],
)
def test_missing_or_invalid_token_is_401(api: Api, headers):
    r = api.client.get("/v1/datasets/pets", headers=headers)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthenticated"
    assert r.headers["www-authenticate"] == "Bearer"


def test_healthz_needs_no_token(api: Api):
    assert api.client.get("/healthz").json() == {"status": "ok"}


def test_reader_reads_but_cannot_commit_or_tag(api: Api):
    assert api.get("/v1/datasets/pets/versions/latest/records", who="alice").status_code == 200
    r = api.post("/v1/datasets/pets/commits", who="alice", json=COMMIT)
    assert r.status_code == 403
    err = r.json()["error"]
    assert err["code"] == "access_denied"
    assert "'alice' needs the writer role on dataset 'pets'" in err["message"]
    assert err["details"] == {"dataset": "pets", "required_role": "writer"}
    assert api.put("/v1/datasets/pets/tags/golden", who="alice", json={"ref": 1}).status_code == 403
    assert api.catalog.store.head("pets") == 1


def test_writer_commits_but_cannot_change_the_access_list(api: Api):
    assert api.post("/v1/datasets/pets/commits", who="bob", json=COMMIT).status_code == 201
    r = api.patch("/v1/datasets/pets", who="bob", json={"acl": {"bob": "admin"}})
    assert r.status_code == 403 and "needs the admin role" in r.json()["error"]["message"]


def test_owner_and_global_admin_administer(api: Api):
    r = api.patch("/v1/datasets/pets", who="owner", json={"acl": {"eve": "reader"}})
    assert r.status_code == 200 and r.json()["acl"] == {"eve": "reader"}
    assert api.get("/v1/datasets/pets", who="eve").status_code == 200
    assert api.get("/v1/datasets/pets", who="alice").status_code == 403  # the acl was replaced
    assert api.patch("/v1/datasets/pets", who="admin", json={"description": "d"}).status_code == 200


def test_no_role_is_403_on_every_dataset_route(api: Api):
    for path in (
        "/v1/datasets/pets",
        "/v1/datasets/pets/versions",
        "/v1/datasets/pets/versions/1",
        "/v1/datasets/pets/versions/1/records",
        "/v1/datasets/pets/versions/1/records/img/001.jpg",
        "/v1/datasets/pets/versions/1/export",
        "/v1/datasets/pets/diff?from=0&to=1",
    ):
        r = api.get(path, who="eve")
        assert r.status_code == 403, path
        assert "needs the reader role on dataset 'pets'" in r.json()["error"]["message"]


def test_listing_shows_only_readable_datasets(api: Api):
    api.catalog.create_dataset("secret", owner="owner")
    api.catalog.create_dataset("public", acl={"*": "reader"})
    names = lambda who: [d["name"] for d in api.get("/v1/datasets", who=who).json()]  # noqa: E731
    assert names("alice") == ["pets", "public"]
    assert names("eve") == ["public"]
    assert names("owner") == ["pets", "public", "secret"]
    assert names("admin") == ["pets", "public", "secret"]


def test_creator_becomes_owner(api: Api):
    r = api.post("/v1/datasets", who="eve", json={"name": "eves", "acl": {"alice": "reader"}})
    assert r.status_code == 201 and r.json()["owner"] == "eve"
    put = {"op": "put", "record": {"key": "a.jpg", "url": "s3://b/a.jpg", "etag": "e", "size": 1}}
    assert api.post("/v1/datasets/eves/commits", who="eve", json={"changes": [put]}).status_code == 201
    assert api.get("/v1/datasets/eves", who="bob").status_code == 403


def test_revoked_token_is_refused(api: Api):
    assert api.get("/v1/datasets/pets", who="alice").status_code == 200
    revoke_token(api.catalog.store, api.tokens["alice"])
    assert api.get("/v1/datasets/pets", who="alice").status_code == 401


def test_tokens_are_stored_only_as_hashes(api: Api):
    secret = api.tokens["bob"]
    info = api.catalog.store.get_token(hash_token(secret))
    assert info is not None and info.principal == "bob" and secret not in repr(info)


def test_whoami(api: Api):
    assert api.get("/v1/whoami", who="bob").json() == {"principal": "bob", "is_admin": False}
    assert api.get("/v1/whoami", who="admin").json() == {"principal": "root", "is_admin": True}


def test_local_mode_needs_no_token(api: Api):
    api.config.api.local_mode = True
    r = api.client.get("/v1/datasets/pets")
    assert r.status_code == 200
    assert api.client.get("/v1/whoami").json() == {"principal": "local", "is_admin": True}


def test_only_global_admins_may_commit_server_local_file_urls(api: Api):
    put = {"op": "put", "record": {"key": "x.jpg", "url": "file:///etc/shadow", "etag": "e", "size": 1}}
    r = api.post("/v1/datasets/pets/commits", who="owner", json={"changes": [put]})
    assert r.status_code == 403 and "server-local file" in r.json()["error"]["message"]
    assert api.catalog.store.head("pets") == 1
    assert api.post("/v1/datasets/pets/commits", who="admin", json={"changes": [put]}).status_code == 201
