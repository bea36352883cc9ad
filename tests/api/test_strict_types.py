"""Strict types at the boundary (issue 24 item 6): ``"size": false`` / ``true`` / ``"7"`` / ``7.5``
and the like were accepted and stored as 0, 1, 7 and 7. Every request model now refuses a
value of the wrong JSON type with the usual 422, and nothing is written. A whole number written
``7.0`` is an integer, as JSON Schema says (issue 37 item 8): taken as 7, never anything lossy."""

from __future__ import annotations

import pytest

from datahub.api.schemas import RequestModel
from tests.api.conftest import Api
from tests.api.test_bad_input import error

WRONG_INTEGERS = [False, True, "7", 7.5, 201.25, None]


def put(size: object) -> dict:
    record = {"key": "typed.jpg", "url": "s3://b/typed.jpg", "etag": "e", "size": size}
    return {"changes": [{"op": "put", "record": record}]}


@pytest.mark.parametrize("size", WRONG_INTEGERS)
def test_a_size_of_the_wrong_type_is_422_and_nothing_is_written(api: Api, size):
    err = error(api.post("/v1/datasets/pets/commits", json=put(size)), 422)
    assert err["code"] == "validation_error" and "size" in err["message"]
    assert api.catalog.store.head("pets") == 1
    assert api.post("/v1/datasets/pets/commits", json=put(7)).status_code == 201


@pytest.mark.parametrize("base", [False, True, "1", 1.5])
def test_a_commit_base_of_the_wrong_type_is_422(api: Api, base):
    body = {"base": base, "changes": [{"op": "delete", "key": "img/000.jpg"}]}
    assert error(api.post("/v1/datasets/pets/commits", json=body), 422)["code"] == "validation_error"
    assert api.catalog.store.head("pets") == 1


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/v1/datasets/pets/tags/best", {"ref": True}),
        ("PUT", "/v1/datasets/pets/tags/best", {"ref": 1.5}),
        ("POST", "/v1/datasets", {"name": "typed", "description": 7}),
        ("PATCH", "/v1/datasets/pets", {"description": False}),
        ("POST", "/v1/datasets/pets/versions/1/derive", {"where": "labels.class=cat", "message": 1}),
        (
            "POST",
            "/v1/datasets/pets/commits",
            {"changes": [{"op": "put", "record": {**put(1)["changes"][0]["record"], "etag": 5}}]},
        ),
        ("PUT", "/v1/remote/datasets/pets/tags/best", {"seq": "1"}),
        ("PUT", "/v1/remote/datasets/pets/tags/best", {"seq": True}),
        ("POST", "/v1/remote/datasets/pets/records/get", {"seq": 1.5, "keys": ["img/000.jpg"]}),
        ("PUT", "/v1/tasks/jobs/j1", {"payloads": [{}], "meta": {}, "extra": 1}),
        ("POST", "/v1/tasks/jobs/j1/claim", {"worker": "w", "lease_seconds": "5"}),
        ("POST", "/v1/tasks/jobs/j1/claim", {"worker": "w", "lease_seconds": True}),
        ("POST", "/v1/tasks/jobs/j1/claim", {"worker": 5}),
    ],
)
def test_every_request_model_refuses_the_wrong_json_type(api: Api, method, path, body):
    r = api.client.request(method, path, json=body, headers=api.as_("admin"))
    assert error(r, 422)["code"] == "validation_error", r.text
    assert api.catalog.store.head("pets") == 1
    assert api.get("/v1/datasets/pets/versions/best").status_code == 404
    assert [d.name for d in api.catalog.list_datasets()] == ["pets"]


def test_the_remote_commit_header_and_changes_are_strict_too(api: Api):
    header = b'{"base": 1, "commit_id": "c1", "message": ""}\n'
    change = b'{"op": "put", "record": {"key": "t.jpg", "url": "s3://b/t", "etag": "e", "size": "7"}}\n'
    r = api.post("/v1/remote/datasets/pets/commits", content=header + change)
    assert r.status_code in (400, 422) and api.catalog.store.head("pets") == 1, r.text
    r = api.post("/v1/remote/datasets/pets/commits", content=header.replace(b"1", b"true", 1) + change)
    assert r.status_code in (400, 422) and api.catalog.store.head("pets") == 1, r.text


def test_every_request_model_is_strict():
    """A route added later is held to it: every body model derives from RequestModel (the two
    commit routes parse their bodies themselves, with the models listed here)."""
    from fastapi.routing import APIRoute

    from datahub.api.remote_models import CommitHeader
    from datahub.api.routes import ROUTERS
    from datahub.api.schemas import CommitCreate, DeleteChange, PatchChange, PutChange

    models = [CommitCreate, PutChange, DeleteChange, PatchChange, CommitHeader]
    for route in (r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)):
        if route.body_field is not None:
            models.append(route.body_field.field_info.annotation)
    assert len(models) > 12
    for model in models:
        assert issubclass(model, RequestModel) and model.model_config.get("strict") is True, model


def test_the_openapi_says_integers_are_integers(api: Api):
    doc = api.get("/openapi.json").json()
    assert doc["components"]["schemas"]["RecordIn"]["properties"]["size"]["type"] == "integer"
    assert "`7.0` as JSON" in doc["info"]["description"] and "never `7.5`" in doc["info"]["description"]


def test_a_whole_number_written_with_a_fraction_is_the_integer_it_equals(api: Api):
    """Issue 37 item 8: schemathesis sent ``"size": 201.0`` (an ``integer`` to JSON Schema) and
    got 422; ``7.5`` stays refused (test above)."""
    assert api.post("/v1/datasets/pets/commits", json=put(201.0)).status_code == 201
    assert api.catalog.get_record("pets", "latest", "typed.jpg").size == 201
    assert type(api.catalog.get_record("pets", "latest", "typed.jpg").size) is int
    body = {"base": 2.0, "changes": [{"op": "delete", "key": "typed.jpg"}]}
    assert api.post("/v1/datasets/pets/commits", json=body).status_code == 201
    assert (
        api.client.put("/v1/datasets/pets/tags/best", json={"ref": 3.0}, headers=api.as_("admin")).status_code
        == 200
    )
    assert api.catalog.resolve("pets", "best").seq == 3


def test_if_match_is_a_string_header_and_null_is_a_documented_412(api: Api):
    """Issue 37 item 8: the schema let ``If-Match`` be JSON null, which a client sends as the
    text ``null``. A header is a string or absent; ``null`` names no revision: the 412 PATCH
    documents, with the usual error body."""
    doc = api.get("/openapi.json").json()
    patch = doc["paths"]["/v1/datasets/{name}"]["patch"]
    header = next(p for p in patch["parameters"] if p["name"].lower() == "if-match")
    assert header["schema"]["type"] == "string" and "anyOf" not in header["schema"]
    assert "412" in patch["responses"]
    r = api.client.patch(
        "/v1/datasets/pets", json={"description": "x"}, headers={**api.as_("admin"), "If-Match": "null"}
    )
    err = error(r, 412)
    assert err["code"] == "precondition_failed" and "'null'" in err["message"]
