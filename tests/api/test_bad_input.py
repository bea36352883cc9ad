"""Promise 4 over HTTP: one error shape, the right status, a message naming the thing, nothing changed."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api


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

    with TestClient(create_app(config, catalog=BrokenCatalog()), raise_server_exceptions=False) as client:
        r = client.get("/v1/datasets")
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "internal" and "secret" not in r.text
