"""The commit body is parsed one change at a time; it must refuse and accept exactly what the
CommitCreate schema says, with the same 422 shape, and write nothing when it refuses."""

from __future__ import annotations

import json

import pytest

from tests.api.conftest import Api
from tests.api.test_bad_input import error

URL = "/v1/datasets/pets/commits"


def put(key: str) -> dict:
    return {"op": "put", "record": {"key": key, "url": f"s3://b/{key}", "etag": "e", "size": 1}}


def post_raw(api: Api, raw: bytes):
    return api.client.post(URL, content=raw, headers={**api.as_("admin"), "Content-Type": "application/json"})


def head(api: Api) -> int:
    return api.get("/v1/datasets/pets").json()["head"]


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b'{"changes": [',
        b'{"changes": [{"op": "put"}',
        b'{"changes": []} x',
        b'{"changes" []}',
        b'[{"op": "delete", "key": "a"}]',
        b'{"changes": [{"op": "delete", "key": "a"},]}',
        b"\xff\xfe",
    ],
)
def test_malformed_json_is_422_and_nothing_is_written(api: Api, raw):
    assert error(post_raw(api, raw), 422)["code"] == "validation_error"
    assert head(api) == 1


def test_a_bad_change_deep_in_the_list_is_422_naming_its_index(api: Api):
    changes = [put(f"new/{i}.jpg") for i in range(50)]
    changes[37] = {"op": "put", "record": {"key": "new/x.jpg", "url": "s3://b/x", "etag": "e", "size": "big"}}
    err = error(api.post(URL, json={"changes": changes}), 422)
    assert err["details"]["errors"][0]["loc"][:3] == ["body", "changes", 37]
    assert head(api) == 1


@pytest.mark.parametrize(
    "body, where",
    [
        ({}, "changes"),
        ({"changes": {"op": "delete"}}, "changes"),
        ({"changes": [put("a")], "surprise": 1}, "surprise"),
        ({"changes": [put("a")], "base": -1}, "base"),
        ({"changes": [{"op": "rename", "key": "a"}]}, "changes.0"),
    ],
)
def test_fields_are_checked_as_the_schema_says(api: Api, body, where):
    err = error(api.post(URL, json=body), 422)
    assert f"body.{where}" in err["message"]
    assert head(api) == 1


def test_fields_after_the_changes_count_and_a_retry_is_idempotent(api: Api):
    raw = json.dumps({"changes": [put("new/a.jpg")], "message": "late", "commit_id": "job-1", "base": 1})
    first = post_raw(api, raw.encode())
    assert first.status_code == 201, first.text
    assert first.json()["message"] == "late"
    again = post_raw(api, raw.encode())
    assert again.status_code == 201 and again.json()["seq"] == first.json()["seq"] == 2
    stale = post_raw(api, json.dumps({"base": 1, "changes": [put("new/b.jpg")]}).encode())
    assert error(stale, 409)["code"] == "stale_base"


def test_unicode_and_escapes_in_changes_round_trip(api: Api):
    raw = '{ "changes" : [ {"op":"put","record":{"key":"new/\\u00e9t\u00e9.jpg","url":"s3://b/x","etag":"e","size":1,"meta":{"a":[1,{"b":null}]}}} ] }'
    r = post_raw(api, raw.encode())
    assert r.status_code == 201, r.text
    rec = api.get("/v1/datasets/pets/versions/2/records/new/%C3%A9t%C3%A9.jpg")
    assert rec.status_code == 200, rec.text
    assert rec.json()["meta"] == {"a": [1, {"b": None}]}
