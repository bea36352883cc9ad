"""The commit body is parsed one change at a time; it must refuse and accept exactly what the
CommitCreate schema says, with the same 422 shape, and write nothing when it refuses."""

from __future__ import annotations

import asyncio
import io
import json
import tracemalloc

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter

from datahub.api import commit_body, limits
from datahub.api.commit_body import CommitBody
from datahub.api.schemas import ChangeIn
from tests.api.conftest import PETS_V1, Api
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


# --- the body is read from its spooled file through a small window -----------------------------
BODIES = [
    '{"changes": [{"op":"put","record":{"key":"a/\u00e9t\u00e9-\u6f22\u5b57-\U0001f600.jpg","url":"s3://b/x",'
    '"etag":"e","size":123456789012,"meta":{"n":-1.5e3,"s":"x\\"y\\\\z\\u00e9","l":[1,[2,[3]]],"t":true,'
    '"f":false,"z":null}}}, {"op":"delete","key":"img/000.jpg"}], "message":"m\u00e9", "base":1}',
    '  {\n "message" : "first" ,"commit_id":"c-1",\t"changes" :[ {"op":"patch","key":"img/001.jpg",'
    '"labels":{"class":"dog"}} ] , "base" : 12345678901 }  \n',
    '{"changes": [{"op":"delete","key":"x"}], "changes": [{"op":"delete","key":"img/002.jpg"}]}',
    '{"changes": [{"op":"delete","key":"x"}], "changes": "not an array"}',
    '{"changes": []}',
    "{}",
]


def parsed(body: CommitBody) -> tuple[dict, list[dict]]:
    return body.fields.model_dump(exclude={"changes"}), [c.model_dump() for c in body.changes()]


@pytest.mark.parametrize("text", BODIES)
@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_a_small_window_reads_the_same_body_as_one_read(text, chunk):
    """Values, numbers, escapes and multi-byte characters cut across reads parse as a whole."""
    raw = text.encode()
    try:
        whole = parsed(CommitBody(raw, chunk=len(raw) + 1))
    except RequestValidationError as exc:
        with pytest.raises(RequestValidationError) as windowed:
            parsed(CommitBody(io.BytesIO(raw), chunk=chunk))
        assert windowed.value.errors()[0]["loc"] == exc.errors()[0]["loc"]
        return
    assert parsed(CommitBody(io.BytesIO(raw), chunk=chunk)) == whole
    assert whole[1] == [c.model_dump() for c in _CHANGE_LIST.validate_python(_last_changes(text))]


_CHANGE_LIST = TypeAdapter(list[ChangeIn])


def _last_changes(text: str) -> list:
    changes = json.loads(text).get("changes", [])
    return changes if isinstance(changes, list) else []


@pytest.mark.parametrize(
    "raw",
    [
        b'{"changes": [{"op": "delete", "key": "a"}] "base": 1}',
        b'{"changes": [{"op": "delete", "key": "a"}, {"op": "del',
        b'{"changes": [{"op": "delete", "key": "a\\q"}]}',
        b'{"changes": [{"op": "delete", "key": "a"}]}   ]',
        b'{"changes": [{"op": "delete", "key": "\xc3"}]}',
        b'{"base": 1',
    ],
)
@pytest.mark.parametrize("chunk", [1, 5, 4096])
def test_malformed_json_names_the_same_position_whatever_the_window(raw, chunk):
    with pytest.raises(RequestValidationError) as whole:
        CommitBody(raw, chunk=len(raw) + 1)
    with pytest.raises(RequestValidationError) as windowed:
        CommitBody(io.BytesIO(raw), chunk=chunk)
    assert windowed.value.errors()[0]["loc"] == whole.value.errors()[0]["loc"]


@pytest.fixture
def small_windows(api: Api, monkeypatch) -> Api:
    """Bodies spill to disk past 1 KiB, are read 512 bytes at a time and committed in batches of
    16 changes, so the tests below cross every boundary many times with small bodies."""
    monkeypatch.setattr(limits, "SPOOL_IN_MEMORY", 1024)
    monkeypatch.setattr(commit_body, "CHUNK", 512)
    api.catalog.store.batch_size = BATCH
    return api


BATCH = 16


@pytest.mark.parametrize("n", [BATCH, BATCH + 1, 10 * BATCH + 3])
def test_a_spooled_body_crossing_batches_commits_every_change(small_windows: Api, n):
    api = small_windows
    changes = [put(f"new/{i:04d}.jpg") for i in range(n)] + [{"op": "delete", "key": "new/0000.jpg"}]
    r = api.post(URL, json={"changes": changes, "message": "many"})
    assert r.status_code == 201, r.text
    assert r.json()["record_count"] == 25 + n - 1
    keys = {rec.key for rec in api.catalog.list_records("pets", 2)}
    assert {f"new/{i:04d}.jpg" for i in range(1, n)} <= keys and "new/0000.jpg" not in keys


@pytest.mark.parametrize(
    "last, status",
    [
        ({"op": "delete", "key": "new/missing.jpg"}, 404),  # refused by the store, mid-transaction
        ({"op": "patch", "key": "img/001.jpg", "meta": {"x": {"y": 1}}, "extra": 1}, 422),  # by the schema
        ({"op": "put", "record": {"key": "new/../up", "url": "s3://b/x", "etag": "e", "size": 1}}, 400),
    ],
)
def test_a_bad_last_change_after_many_batches_leaves_no_version_and_no_rows(small_windows: Api, last, status):
    api = small_windows
    changes = [put(f"new/{i:04d}.jpg") for i in range(5 * BATCH)] + [
        {"op": "delete", "key": "img/000.jpg"},
        last,
    ]
    error(api.post(URL, json={"changes": changes}), status)
    assert head(api) == 1
    assert [v.seq for v in api.catalog.log("pets")] == [1]
    # nothing of the rolled-back batches is left: the next commit is version 2 with only its change
    r = api.post(URL, json={"changes": [put("new/only.jpg")]})
    assert r.status_code == 201 and r.json()["seq"] == 2 and r.json()["record_count"] == 26
    assert {rec.key for rec in api.catalog.list_records("pets", 2)} == {r.key for r in PETS_V1} | {
        "new/only.jpg"
    }


def test_a_commit_id_digest_covers_the_changes_after_the_first_batches(small_windows: Api):
    api = small_windows
    changes = [put(f"new/{i:04d}.jpg") for i in range(4 * BATCH)]
    assert api.post(URL, json={"changes": changes, "commit_id": "job-7"}).status_code == 201
    same = api.post(URL, json={"changes": changes, "commit_id": "job-7"})
    assert same.status_code == 201 and same.json()["seq"] == 2
    changes[-1] = put("new/other.jpg")
    assert (
        error(api.post(URL, json={"changes": changes, "commit_id": "job-7"}), 409)["code"]
        == "commit_id_reused"
    )
    assert head(api) == 2


def test_the_body_limits_middleware_holds_a_big_body_on_disk_not_in_memory():
    """An 8 MiB body costs about SPOOL_IN_MEMORY of Python memory, and a route that reads
    ``request.body()`` still gets every byte."""
    size, piece = 8 * 1024 * 1024, 64 * 1024
    seen: dict = {}

    async def app(scope, receive, send):
        spooled = limits.body_file(scope)
        seen["peak_before_read"] = tracemalloc.get_traced_memory()[1]
        seen["spooled_size"] = spooled.seek(0, io.SEEK_END)
        message = await receive()
        seen["replayed"] = len(message["body"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent = 0

    async def receive():
        nonlocal sent
        sent += piece
        return {"type": "http.request", "body": b"x" * piece, "more_body": sent < size}

    async def send(message):
        pass

    middleware = limits.BodyLimits(
        app, max_body_bytes=size, body_read_timeout=60, budget=limits.BodyBudget(size)
    )
    scope = {"type": "http", "headers": [(b"content-length", str(size).encode())]}
    tracemalloc.start()
    try:
        asyncio.run(middleware(scope, receive, send))
    finally:
        tracemalloc.stop()
    assert seen["spooled_size"] == seen["replayed"] == size
    assert seen["peak_before_read"] < limits.SPOOL_IN_MEMORY + 4 * piece + 512 * 1024
