"""Promise 5: tokens are required outside local mode; roles gate every dataset operation."""

from __future__ import annotations

import json

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
    assert api.get("/v1/datasets/pets", who="alice").status_code == 404  # the acl was replaced: hidden
    assert api.patch("/v1/datasets/pets", who="admin", json={"description": "d"}).status_code == 200


def test_no_role_is_404_like_a_missing_dataset_on_every_dataset_route(api: Api):
    """docs/api.md: a dataset the caller may not read answers exactly as a missing one does."""
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
        missing = api.get(path.replace("/pets", "/nopets", 1), who="eve").json()
        assert r.status_code == 404, path
        assert r.json() == {
            "error": {
                **missing["error"],
                "message": missing["error"]["message"].replace("nopets", "pets"),
                "details": {"dataset": "pets"},
            }
        }, path


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
    # owning a dataset does not let its records name any object (tests/api/test_record_urls.py):
    # a global admin allows the prefix first
    assert api.post("/v1/datasets/eves/commits", who="eve", json={"changes": [put]}).status_code == 403
    assert api.patch("/v1/datasets/eves", json={"sources": ["s3://b/"]}).status_code == 200
    assert api.post("/v1/datasets/eves/commits", who="eve", json={"changes": [put]}).status_code == 201
    assert api.get("/v1/datasets/eves", who="bob").status_code == 404


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


def test_the_file_url_rule_holds_whatever_the_schemes_case(api: Api):
    """The storage layer reads ``FILE://`` as ``file://`` (schemes are case-insensitive), so the
    admin-only rule must too, on the public and the remote commit routes."""
    for url in ("FILE:///etc/shadow", "File://localhost/etc/shadow", "fIlE:///data/img/000.jpg"):
        put = {"op": "put", "record": {"key": "x.jpg", "url": url, "etag": "e", "size": 1}}
        r = api.post("/v1/datasets/pets/commits", who="owner", json={"changes": [put]})
        assert r.status_code == 403 and "server-local file" in r.json()["error"]["message"], (url, r.text)
        header = {"base": 1, "message": "m", "author": "", "lineage": {}, "commit_id": f"c-{url}"}
        body = "\n".join(json.dumps(x) for x in (header, put)) + "\n"
        r = api.post("/v1/remote/datasets/pets/commits", who="bob", content=body)
        assert r.status_code == 403 and "server-local file" in r.json()["error"]["message"], (url, r.text)
    assert api.catalog.store.head("pets") == 1


def test_only_global_admins_may_commit_rados_urls(api: Api):
    """A ``rados://`` URL names an object in the deployment's own Ceph pool (the shared cache
    tier), read with the server's and the nodes' Ceph identity, like file:// names its disk;
    the public schema does not even list the scheme."""
    put = {
        "op": "put",
        "record": {"key": "x.jpg", "url": "rados://cache/pool/p/0", "etag": "v1-400000", "size": 1},
    }
    for url in ("rados://cache/pool/p/0", "RADOS://cache/pool/p/0"):
        put["record"]["url"] = url
        r = api.post("/v1/datasets/pets/commits", who="owner", json={"changes": [put]})
        assert r.status_code == 403 and "rados://" in r.json()["error"]["message"], (url, r.text)
        header = {"base": 1, "message": "m", "author": "", "lineage": {}, "commit_id": f"c-{url}"}
        body = "\n".join(json.dumps(x) for x in (header, put)) + "\n"
        r = api.post("/v1/remote/datasets/pets/commits", who="bob", content=body)
        assert r.status_code == 403, (url, r.text)
    assert api.catalog.store.head("pets") == 1
    assert api.post("/v1/datasets/pets/commits", who="admin", json={"changes": [put]}).status_code == 201


def test_unreadable_and_missing_datasets_look_the_same_on_writes_too(api: Api):
    """Enumeration attack: probing names with any method must not tell hidden from missing."""
    for who in ("eve",):
        for name in ("pets", "nopets"):
            for r in (
                api.post(f"/v1/datasets/{name}/commits", who=who, json=COMMIT),
                api.patch(f"/v1/datasets/{name}", who=who, json={"description": "x"}),
                api.put(f"/v1/datasets/{name}/tags/t", who=who, json={"ref": 1}),
                api.post(
                    f"/v1/datasets/{name}/versions/1/derive", who=who, json={"where": "labels.class=cat"}
                ),
            ):
                assert r.status_code == 404, (name, r.request.url)
                assert r.json()["error"]["code"] == "dataset_not_found"
                assert r.json()["error"]["message"].startswith(f"dataset {name!r} not found")
    assert api.catalog.get_dataset("pets").description == ""


def test_a_reader_without_writer_still_gets_403(api: Api):
    r = api.patch("/v1/datasets/pets", who="alice", json={"description": "x"})
    assert r.status_code == 403 and "needs the admin role" in r.json()["error"]["message"]


def test_derive_into_a_new_dataset_makes_the_caller_its_owner_with_no_copied_acl(api: Api):
    """Attack: a reader derived into a new dataset that copied the source's owner and ACL."""
    body = {"where": "labels.class=cat", "to_dataset": "alicecats"}
    r = api.post("/v1/datasets/pets/versions/1/derive", who="alice", json=body)
    assert r.status_code == 201
    new = api.catalog.get_dataset("alicecats")
    assert new.owner == "alice" and new.acl == {}
    assert api.get("/v1/datasets/alicecats", who="owner").status_code == 404  # not copied
    assert api.get("/v1/datasets/alicecats", who="bob").status_code == 404
    # same rule as POST /v1/datasets: the creator owns it
    direct = api.post("/v1/datasets", who="alice", json={"name": "alicedogs"})
    assert direct.json()["owner"] == new.owner


def test_derive_into_an_existing_dataset_needs_writer_there(api: Api):
    api.catalog.create_dataset("target", owner="owner", acl={"alice": "reader", "bob": "writer"})
    body = {"where": "labels.class=cat", "to_dataset": "target"}
    r = api.post("/v1/datasets/pets/versions/1/derive", who="alice", json=body)
    assert (
        r.status_code == 403 and "needs the writer role on dataset 'target'" in r.json()["error"]["message"]
    )
    assert api.catalog.store.head("target") == 0
    api.catalog.create_dataset("hidden", owner="owner")
    r = api.post("/v1/datasets/pets/versions/1/derive", who="alice", json={**body, "to_dataset": "hidden"})
    assert r.status_code == 404 and api.catalog.store.head("hidden") == 0
    assert api.post("/v1/datasets/pets/versions/1/derive", who="bob", json=body).status_code == 201
    assert api.catalog.get_dataset("target").owner == "owner"


def test_derive_with_a_bad_ref_or_filter_creates_nothing(api: Api):
    for ref, where in (("9", "labels.class=cat"), ("1", "not a filter"), ("1", " ")):
        body = {"where": where, "to_dataset": "ghost"}
        r = api.post(f"/v1/datasets/pets/versions/{ref}/derive", who="alice", json=body)
        assert r.status_code in (400, 404), (ref, where)
    assert "ghost" not in [d.name for d in api.catalog.list_datasets()]


def test_a_derive_that_matches_nothing_creates_nothing(api: Api):
    """An empty derive used to make an empty dataset and version; now it is 400 no_changes."""
    body = {"where": "labels.class=unicorn", "to_dataset": "ghost"}
    r = api.post("/v1/datasets/pets/versions/1/derive", who="alice", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "no_changes"
    assert "ghost" not in [d.name for d in api.catalog.list_datasets()]
    head = api.catalog.store.head("pets")
    r = api.post("/v1/datasets/pets/versions/latest/derive", who="owner", json={"where": "size>=0"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "no_changes"
    assert api.catalog.store.head("pets") == head
