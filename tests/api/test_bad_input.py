"""Promise 4 over HTTP: one error shape, the right status, a message naming the thing, nothing changed."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api

# a local-mode app answers only requests addressed to this machine (datahub/api/local_mode.py)
LOCAL = "http://127.0.0.1"


def error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and {"code", "message", "details"} <= set(body["error"])
    return body["error"]


@pytest.mark.parametrize("name", ["Upper", "-dash", "a" * 64, "sp ace", "ünï"])
def test_invalid_dataset_name_is_400(api: Api, name):
    err = error(api.post("/v1/datasets", json={"name": name}), 400)
    assert err["code"] == "invalid_name" and "invalid dataset name" in err["message"]


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("", "non-empty"),
        ("/etc/passwd", "relative"),
        ("a/../../b", "'..'"),
        ("nul\x00byte", "control"),
        ("tab\tkey", "control"),
        ("k" * 1025, "longer than 1024 bytes"),
    ],
)
def test_invalid_key_in_a_commit_is_400_and_nothing_is_written(api: Api, key, why):
    changes = [
        {"op": "put", "record": {"key": "ok.jpg", "url": "s3://b/ok", "etag": "e", "size": 1}},
        {"op": "put", "record": {"key": key, "url": "s3://b/x", "etag": "e", "size": 1}},
    ]
    err = error(api.post("/v1/datasets/pets/commits", json={"changes": changes}), 400)
    assert err["code"] == "invalid_key" and why in err["message"]
    assert api.catalog.store.head("pets") == 1


def test_stale_base_is_409_and_nothing_is_written(api: Api):
    change = {"changes": [{"op": "delete", "key": "img/000.jpg"}]}
    assert api.post("/v1/datasets/pets/commits", json={"base": 1, **change}).status_code == 201
    err = error(
        api.post(
            "/v1/datasets/pets/commits", json={"base": 1, "changes": [{"op": "delete", "key": "img/001.jpg"}]}
        ),
        409,
    )
    assert err["code"] == "stale_base" and "'pets'" in err["message"]
    assert api.catalog.store.head("pets") == 2
    assert api.get("/v1/datasets/pets/versions/latest/records/img/001.jpg").status_code == 200


@pytest.mark.parametrize(
    ("path", "code", "named"),
    [
        ("/v1/datasets/ghost", "dataset_not_found", "'ghost'"),
        ("/v1/datasets/ghost/versions/1", "dataset_not_found", "'ghost'"),
        ("/v1/datasets/pets/versions/9", "version_not_found", "9"),
        ("/v1/datasets/pets/versions/nosuchtag", "version_not_found", "nosuchtag"),
        ("/v1/datasets/pets/versions/1/records/img/999.jpg", "record_not_found", "img/999.jpg"),
        ("/v1/datasets/pets/versions/9/export", "version_not_found", "9"),
        ("/v1/datasets/pets/diff?from=1&to=7", "version_not_found", "7"),
    ],
)
def test_unknown_dataset_version_tag_or_record_is_404_naming_it(api: Api, path, code, named):
    err = error(api.get(path), 404)
    assert err["code"] == code and named in err["message"]


def test_deleting_an_unknown_tag_is_404(api: Api):
    err = error(api.delete("/v1/datasets/pets/tags/nosuch"), 404)
    assert "nosuch" in err["message"]


def test_unknown_route_and_wrong_method_use_the_error_shape(api: Api):
    assert error(api.get("/v2/nothing"), 404)["code"] == "not_found"
    assert error(api.client.delete("/healthz"), 405)["code"] == "method_not_allowed"


def test_schema_violation_is_422_in_the_same_shape(api: Api):
    err = error(api.post("/v1/datasets/pets/commits", json={"changes": [{"op": "rename", "key": "a"}]}), 422)
    assert err["code"] == "validation_error" and err["details"]["errors"]
    assert (
        error(api.get("/v1/datasets/pets/versions/1/records", params={"limit": 0}), 422)["code"]
        == "validation_error"
    )


def test_invalid_filter_cursor_and_prefix_are_400(api: Api):
    base = "/v1/datasets/pets/versions/1/records"
    assert "invalid filter term" in error(api.get(base, params={"filter": "color~red"}), 400)["message"]
    # issue 37 item 5: a doubled '=' was the value "=cat", matching nothing with 200
    doubled = error(api.get(base, params={"filter": "labels.class==cat"}), 400)["message"]
    assert "'labels.class==cat'" in doubled and "write labels.class=cat" in doubled
    assert "invalid cursor" in error(api.get(base, params={"cursor": "%%%"}), 400)["message"]
    assert error(api.get(base, params={"prefix": "../x"}), 400)["code"] == "invalid_key"


def test_oversized_body_is_413_and_nothing_is_written(api: Api):
    big = {"key": "x.jpg", "url": "s3://b/x", "etag": "e", "size": 1, "meta": {"pad": "p" * 70_000}}
    err = error(api.post("/v1/datasets/pets/commits", json={"changes": [{"op": "put", "record": big}]}), 413)
    assert err["code"] == "payload_too_large" and "65536" in err["message"]
    assert api.catalog.store.head("pets") == 1


def test_oversized_chunked_body_without_content_length_is_413(api: Api):
    def chunks():
        yield b'{"changes": [{"op": "delete", "key": "'
        for _ in range(100):
            yield b"k" * 1024
        yield b'"}]}'

    r = api.client.post(
        "/v1/datasets/pets/commits",
        content=chunks(),
        headers={**api.as_("admin"), "Content-Type": "application/json"},
    )
    assert "content-length" not in {k.lower() for k in r.request.headers}
    assert error(r, 413)["code"] == "payload_too_large"
    assert api.catalog.store.head("pets") == 1


def test_small_chunked_body_passes(api: Api):
    def chunks():
        yield b'{"changes": [{"op": "delete", '
        yield b'"key": "img/000.jpg"}]}'

    r = api.client.post(
        "/v1/datasets/pets/commits",
        content=chunks(),
        headers={**api.as_("admin"), "Content-Type": "application/json"},
    )
    assert r.status_code == 201, r.text


def test_an_unexpected_failure_is_500_in_the_same_shape(config):
    from datahub.api import create_app
    from tests.api.conftest import TestClient

    class BrokenCatalog:
        def list_datasets(self):
            raise RuntimeError("secret internals")

    with TestClient(
        create_app(config, catalog=BrokenCatalog()), raise_server_exceptions=False, base_url=LOCAL
    ) as client:
        r = client.get("/v1/datasets")
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "internal" and "secret" not in r.text


# --- hostile input (issue 12): a clear 4xx, nothing written, every version still readable ------
def nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def put(key: str = "x.jpg", **fields) -> dict:
    return {"op": "put", "record": {"key": key, "url": f"s3://b/{key}", "etag": "e", "size": 1, **fields}}


def assert_all_versions_readable(api: Api, head: int = 1) -> None:
    assert api.catalog.store.head("pets") == head
    for seq in range(1, head + 1):
        page = api.get(f"/v1/datasets/pets/versions/{seq}/records", params={"limit": 10000})
        assert page.status_code == 200, page.text
        export = api.get(f"/v1/datasets/pets/versions/{seq}/export")
        assert export.status_code == 200 and len(export.text.splitlines()) == len(page.json()["items"])
        for item in page.json()["items"]:
            assert api.get(f"/v1/datasets/pets/versions/{seq}/records/{item['key']}").status_code == 200
    assert api.get("/v1/datasets/pets/diff", params={"from": 0, "to": head}).status_code == 200


@pytest.mark.parametrize(
    "change",
    [
        put(meta=nested(300)),
        "labels-600-deep",  # sent as raw JSON text: the client's own encoder would recurse
        put(meta=nested(33)),
        put(labels={"a": {"b": nested(31)}}),
        {"op": "patch", "key": "img/000.jpg", "labels": nested(300)},
    ],
)
def test_deep_or_large_meta_is_400_and_nothing_is_written(api: Api, change):
    """(The 64 KiB size limit per field is checked in tests/catalog: this fixture's body limit is 64 KiB.)"""
    if change == "labels-600-deep":
        deep = '{"n":' * 599 + "{}" + "}" * 599
        body = '{"changes": [{"op": "put", "record": {"key": "x", "url": "s3://b/x", "etag": "e", "size": 1,'
        headers = api.as_("admin") | {"Content-Type": "application/json"}
        r = api.client.post(
            "/v1/datasets/pets/commits", content=body + f'"labels": {deep}}}}}]}}', headers=headers
        )
    else:
        r = api.post("/v1/datasets/pets/commits", json={"changes": [put("ok.jpg"), change]})
    err = error(r, 400)
    assert err["code"] == "invalid_input" and "'pets'" in err["message"]
    assert "deeper than 32 levels" in err["message"]
    assert_all_versions_readable(api)


def test_a_deep_record_already_stored_stays_readable_everywhere(api: Api):
    """Written before the limit existed (straight to the store): every read path answers, with a marker."""
    from datahub.catalog.model import Put, Record

    deep = Record("deep.jpg", "s3://b/deep.jpg", "e", 1, "", nested(300), {"class": "cat"})
    api.catalog.store.commit("pets", 1, [Put(deep)])
    marker = {
        "datahub_unreadable": "nested deeper than 32 levels; written before datahub refused such values"
    }
    got = api.get("/v1/datasets/pets/versions/2/records/deep.jpg")
    assert (
        got.status_code == 200 and got.json()["meta"] == marker and got.json()["labels"] == {"class": "cat"}
    )
    diff = api.get("/v1/datasets/pets/diff", params={"from": 1, "to": 2}).json()["items"]
    assert [(e["kind"], e["new"]["meta"]) for e in diff] == [("added", marker)]
    ndjson = api.get("/v1/datasets/pets/diff", params={"from": 1, "to": 2, "format": "ndjson"})
    assert len(ndjson.text.splitlines()) == 1
    assert_all_versions_readable(api, head=2)


@pytest.mark.parametrize("tag", ["v3", "v1", "latest", "v02"])
def test_tags_named_like_versions_are_400_and_nothing_is_stored(api: Api, tag):
    api.post("/v1/datasets/pets/commits", json={"changes": [put()]})
    api.post("/v1/datasets/pets/commits", json={"changes": [put("y.jpg")]})
    err = error(api.put(f"/v1/datasets/pets/tags/{tag}", json={"ref": 1}), 400)
    assert err["code"] == "invalid_name" and "version reference" in err["message"]
    assert api.get("/v1/datasets/pets/versions/1").json()["tags"] == []
    if tag != "latest":
        assert api.get(f"/v1/datasets/pets/versions/{tag}").json()["seq"] == int(tag[1:])
    assert_all_versions_readable(api, head=3)


@pytest.mark.parametrize(
    "path",
    [
        "/v1/datasets/pets/versions/99999999999999999999",
        "/v1/datasets/pets/versions/v99999999999999999999",
        f"/v1/datasets/pets/versions/{2**63}/records",
        f"/v1/datasets/pets/versions/{2**70}/export",
        f"/v1/datasets/pets/versions/{2**64}/records/img/000.jpg",
        "/v1/datasets/pets/diff?from=99999999999999999999",
        "/v1/datasets/pets/diff?from=1&to=99999999999999999999",
        f"/v1/remote/datasets/pets/versions/{2**63}",  # the remote store's route: was a 500
        "/v1/remote/datasets/pets/versions/99999999999999999999",
    ],
)
def test_huge_version_numbers_are_404(api: Api, path):
    err = error(api.get(path), 404)
    assert err["code"] == "version_not_found" and "'pets'" in err["message"]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"changes": [put(size=2**70)]}, "invalid size"),
        ({"changes": [put(size=2**63)]}, "invalid size"),
        ({"base": 2**70, "changes": [put()]}, "invalid base version"),
        ({"changes": [put(url="ftp://host/x.jpg")]}, "unsupported object url"),
        ({"changes": [put(url="gopher://host/x.jpg")]}, "unsupported object url"),
        ({"changes": [put(etag="")]}, "empty etag"),
        ({"changes": []}, "no changes"),
    ],
)
def test_bad_commits_are_400_and_nothing_is_written(api: Api, body, why):
    err = error(api.post("/v1/datasets/pets/commits", json=body), 400)
    assert why in err["message"]
    assert_all_versions_readable(api)


def test_an_empty_change_set_is_400_no_changes(api: Api):
    err = error(api.post("/v1/datasets/pets/commits", json={"changes": [], "commit_id": "c-1"}), 400)
    assert err["code"] == "no_changes" and "no version created" in err["message"]
    assert_all_versions_readable(api)


@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\u200f", "\u2066", "\u2069", "\u202a"])
def test_keys_with_bidi_or_invisible_characters_are_400(api: Api, char):
    err = error(api.post("/v1/datasets/pets/commits", json={"changes": [put(f"img/{char}gpj.exe")]}), 400)
    assert err["code"] == "invalid_key" and "invisible format characters" in err["message"]
    assert_all_versions_readable(api)


def test_a_reused_commit_id_with_other_changes_is_409_naming_it(api: Api):
    first = api.post("/v1/datasets/pets/commits", json={"changes": [put()], "commit_id": "job-7"})
    assert first.status_code == 201
    again = api.post("/v1/datasets/pets/commits", json={"changes": [put()], "commit_id": "job-7"})
    assert again.status_code == 201 and again.json() == first.json()  # a retry: idempotent
    err = error(
        api.post("/v1/datasets/pets/commits", json={"changes": [put("y.jpg")], "commit_id": "job-7"}), 409
    )
    assert err["code"] == "commit_id_reused" and "'job-7'" in err["message"] and "pets@v2" in err["message"]
    assert_all_versions_readable(api, head=2)
    assert api.get("/v1/datasets/pets/versions/latest/records/y.jpg").status_code == 404


@pytest.mark.parametrize("spec", ["size>abc", "size=abc", "labels.score>=high"])
def test_non_numeric_operands_of_numeric_comparisons_are_400(api: Api, spec):
    for path in ("records", "export"):
        err = error(api.get(f"/v1/datasets/pets/versions/1/{path}", params={"filter": spec}), 400)
        assert "needs a number" in err["message"] and spec in err["message"]


def test_an_empty_owner_is_400(api: Api):
    err = error(api.patch("/v1/datasets/pets", json={"owner": ""}), 400)
    assert "invalid owner" in err["message"] and "'pets'" in err["message"]
    assert api.get("/v1/datasets/pets").json()["owner"] == "owner"


def test_keep_alive_survives_bad_input_and_a_500_says_connection_close(config):
    """A pooled client must never send into a connection the server silently closed."""
    import http.client

    from datahub.api import create_app
    from datahub.api.server import ApiServer
    from datahub.catalog import open_catalog

    config.api.port = 0
    config.home_path.mkdir(parents=True, exist_ok=True)
    catalog = open_catalog(config.resolved_catalog_url)
    catalog.create_dataset("pets")
    app = create_app(config, catalog=catalog)

    def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/boom", boom)
    with ApiServer(app, config) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for path in (
            f"/v1/datasets/pets/versions/{2**70}",
            "/v1/datasets/pets/diff?from=99999999999999999999",
        ):
            conn.request("GET", path)
            r = conn.getresponse()
            r.read()
            assert r.status == 404 and not r.will_close
        sock = conn.sock
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        assert r.status == 200 and r.read() and conn.sock is sock  # the same connection, kept alive
        conn.request("GET", "/boom")
        r = conn.getresponse()
        r.read()
        assert r.status == 500 and r.getheader("Connection") == "close" and r.will_close
        conn.request("GET", "/healthz")  # http.client reconnects because it was told to
        assert conn.getresponse().status == 200
        conn.close()
    catalog.close()


@pytest.mark.parametrize(
    "body",
    [
        {"name": "made", "acl": {"not a principal": "reader"}},
        {"name": "made", "acl": {"": "reader"}},
        {"name": "made", "owner": "no such: principal"},
    ],
)
def test_the_remote_store_refuses_the_access_entries_the_public_route_refuses(api: Api, body):
    """Nodes create datasets through /v1/remote/datasets: the same principal rule as
    POST /v1/datasets and PATCH (docs/api.md, "Access lists"), so no entry is stored that no
    caller can present."""
    err = error(api.post("/v1/remote/datasets", json=body), 400)
    assert err["code"] == "invalid_name" and "invalid principal" in err["message"]
    assert error(api.get("/v1/datasets/made"), 404)["code"] == "dataset_not_found"
