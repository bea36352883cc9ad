"""The three places schemathesis found the schema and the server disagreeing (issue 24 item 7):
an arbitrary ``cursor`` (400), a diff ``prefix`` with a control character (400) and
``If-Match: null`` (412 "not -1"). The schema now says what the server takes, checked here
value by value against the served OpenAPI document."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.api.routes.diff import diff_listing
from datahub.api.routes.pagination import at_version, encode_cursor
from datahub.api.routes.records import records_listing
from tests.api.conftest import Api
from tests.api.test_bad_input import error

ONCE = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)


def query_schema(api: Api, path: str, name: str) -> dict:
    doc = api.client.app.openapi()
    return next(p["schema"] for p in doc["paths"][path]["get"]["parameters"] if p["name"] == name)


def schema_valid(schema: dict, value: str) -> bool:
    return len(value) <= schema.get("maxLength", len(value)) and bool(re.search(schema["pattern"], value))


RECORDS = "/v1/datasets/{name}/versions/{ref}/records"
DIFF = "/v1/datasets/{name}/diff"
CURSOR_TEXT = st.text(st.sampled_from("AZaz09-_=+/.é\x00 "), max_size=12) | st.binary(max_size=20).map(
    lambda b: __import__("base64").urlsafe_b64encode(b).decode().rstrip("=")
)


ROUTES = pytest.mark.parametrize(
    ("path", "url", "extra"),
    [(RECORDS, "/v1/datasets/pets/versions/1/records", {}), (DIFF, "/v1/datasets/pets/diff", {"from": 0})],
)


@pytest.mark.parametrize(
    ("path", "url", "extra"),
    [
        (RECORDS, "/v1/datasets/pets/versions/1/records", {}),
        (DIFF, "/v1/datasets/pets/diff", {"from": 0}),
        (DIFF, "/v1/datasets/pets/diff", {"from": 0, "format": "ndjson"}),  # streams all, same rule
    ],
)
@ONCE
@given(cursor=CURSOR_TEXT)
def test_a_cursor_the_schema_refuses_is_400_and_one_the_server_gave_of_its_shape_is_taken(
    api: Api, path, url, extra, cursor
):
    """The schema says a cursor's shape; that it is one the server gave (its check, its
    listing) no schema can say, so a made-up cursor of that shape is 400 as well
    (tests/api/test_cursor_garbage.py), and one the server gave is always of that shape."""
    schema = query_schema(api, path, "cursor")
    assert schema["type"] == "string"
    r = api.get(url, params={"cursor": cursor, "limit": 3, **extra})
    if not schema_valid(schema, cursor):
        assert error(r, 400)["code"] == "invalid_input", cursor
    elif cursor:
        assert error(r, 400)["details"]["parameter"] == "cursor", cursor
    listing = (
        records_listing("pets", "1", "", None) if path == RECORDS else diff_listing("pets", "0", "latest", "")
    )
    # what the server issues: a position carries its version, a diff's both (pagination.at_version)
    issued = encode_cursor(
        at_version(1, cursor) if path == RECORDS else at_version(0, at_version(1, cursor)), listing
    )
    assert schema_valid(schema, issued)
    r = api.get(url, params={"cursor": issued, "limit": 3, **extra})
    assert r.status_code == 200, (cursor, r.text)


def test_a_cursor_the_server_issued_pages_on(api: Api):
    first = api.get("/v1/datasets/pets/versions/1/records", params={"limit": 2}).json()
    rest = api.get(
        "/v1/datasets/pets/versions/1/records", params={"limit": 2, "cursor": first["next_cursor"]}
    )
    assert rest.json()["items"][0]["key"] == "img/002.jpg"


PREFIX_TEXT = st.lists(
    st.sampled_from(["img", "/", ".", "\x01", "\x7f", "\u202e", "0", "é"]), max_size=6
).map("".join)


@ROUTES
@ONCE
@given(prefix=PREFIX_TEXT)
def test_any_prefix_the_schema_takes_is_taken_and_no_other(api: Api, path, url, extra, prefix):
    schema = query_schema(api, path, "prefix")
    r = api.get(url, params={"prefix": prefix, "limit": 3, **extra})
    if schema_valid(schema, prefix):
        assert r.status_code == 200, (prefix, r.text)
    else:
        assert error(r, 400)["code"] == "invalid_key", prefix


def test_if_match_naming_no_revision_is_412_with_a_message_that_says_so(api: Api):
    for header in ("null", 'W/"r1"', '"1"'):
        r = api.client.patch(
            "/v1/datasets/pets", headers={**api.as_("owner"), "If-Match": header}, json={"description": "y"}
        )
        err = error(r, 412)
        assert err["code"] == "precondition_failed" and "-1" not in err["message"], err
        assert repr(header) in err["message"] and '"r0"' in err["message"] and "'pets'" in err["message"]
        assert err["details"] == {"dataset": "pets", "revision": 0}
    assert api.catalog.get_dataset("pets").description == ""
