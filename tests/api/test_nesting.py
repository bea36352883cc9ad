"""Deeply nested bodies (issue 24 item 1): every route that takes a body answers 400
``invalid_input`` at any depth, before anything parses the body, and nothing is written.

Python's json decoder and pydantic recurse, so a body nested about 1,000 levels deep used to
end in a RecursionError (a 500) in the commit route and a 400 with the undocumented code
``http_error`` elsewhere. The scanner (datahub.api.body_depth) is also held to an exact
reference on arbitrary JSON cut into arbitrary chunks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from fastapi.routing import APIRoute
from hypothesis import given, settings
from hypothesis import strategies as st

from datahub.api.body_depth import MAX_BODY_DEPTH, BodyError, DepthScanner
from datahub.api.routes import ROUTERS
from tests.api.conftest import Api, api_for
from tests.api.test_bad_input import error

PARAMS = {
    "name": "pets",
    "ref": "1",
    "tag": "t1",
    "job": "j1",
    "index": "0",
    "key": "img/000.jpg",
    "seq": "1",
}


def body_routes() -> list[tuple[str, str]]:
    """Every (method, path) of the app that takes a body, documented or internal."""
    found = []
    for route in (r for router in ROUTERS for r in router.routes):
        if isinstance(route, APIRoute):
            path = re.sub(r"{(\w+)(:path)?}", lambda m: PARAMS[m.group(1)], route.path)
            found += [(m, path) for m in sorted(route.methods & {"POST", "PUT", "PATCH"})]
    return found


def nested(levels: int, field: str = "message") -> bytes:
    """A body whose ``field`` holds ``levels`` nested arrays around a 1."""
    return b'{"%s": ' % field.encode() + b"[" * levels + b"1" + b"]" * levels + b"}"


def test_there_are_body_routes_to_check(api: Api):
    routes = body_routes()
    assert ("POST", "/v1/datasets/pets/commits") in routes
    assert ("POST", "/v1/remote/datasets/pets/commits") in routes
    assert len(routes) >= 10, routes


@pytest.fixture
def roomy_api(config) -> Iterator[Api]:
    """The ``api`` fixture with a body limit that lets 10^5 levels in (it has 64 KiB)."""
    config.api.max_body_bytes = 1024 * 1024
    with api_for(config) as api:
        yield api


@pytest.mark.parametrize("levels", [1_000, 10_000, 100_000])
def test_every_body_route_refuses_deep_nesting_with_400_invalid_input(roomy_api: Api, levels):
    api = roomy_api
    for method, path in body_routes():
        for body in (nested(levels), nested(levels, "changes"), b"[" * levels):
            r = api.client.request(
                method, path, content=body, headers={**api.as_("admin"), "Content-Type": "application/json"}
            )
            err = error(r, 400)
            assert err["code"] == "invalid_input", (method, path, err)
            assert f"deeper than {MAX_BODY_DEPTH} levels" in err["message"] and path in err["message"]
    assert api.catalog.store.head("pets") == 1
    assert [d.name for d in api.catalog.list_datasets()] == ["pets"]


def test_meta_at_its_depth_limit_still_commits_and_one_more_level_names_the_record(api: Api):
    def meta(levels: int) -> dict:
        value: dict = {}
        for _ in range(levels - 1):
            value = {"a": value}
        return value

    def put(levels: int) -> dict:
        record = {"key": "deep.jpg", "url": "s3://b/d", "etag": "e", "size": 1, "meta": meta(levels)}
        return {"changes": [{"op": "put", "record": record}]}

    assert api.post("/v1/datasets/pets/commits", json=put(32)).status_code == 201
    err = error(api.post("/v1/datasets/pets/commits", json=put(33)), 400)
    assert err["code"] == "invalid_input" and "'deep.jpg'" in err["message"]


def test_a_body_that_is_not_utf8_is_400_invalid_input(api: Api):
    for method, path in body_routes():
        for body in ('{"name": "x"}'.encode("utf-16"), b'{"name": "\xff"}'):
            r = api.client.request(
                method, path, content=body, headers={**api.as_("admin"), "Content-Type": "application/json"}
            )
            if r.status_code == 422:  # a syntax error from the route's own parser: documented too
                assert r.json()["error"]["code"] == "validation_error"
                continue
            if r.status_code == 400:
                assert r.json()["error"]["code"] == "invalid_input", (method, path, r.text)
                continue
            assert r.status_code < 500, (method, path, r.text)


# --- the scanner against a reference --------------------------------------------------------------
def reference_depth(text: str) -> int:
    """Deepest bracket nesting of a JSON text, one character at a time."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


TRICKY = st.sampled_from(['"', "\\", "[", "]", "{", "}", '\\"', "\\\\", "ü", "\u202e", "x"])
STRINGS = st.lists(TRICKY, max_size=12).map("".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | STRINGS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(STRINGS, inner, max_size=4),
    max_leaves=60,
)


@settings(max_examples=400, deadline=None)
@given(
    JSON,
    st.lists(st.integers(min_value=1, max_value=40), max_size=30),
    st.integers(1, 12),
    st.sampled_from([None, 400]),  # wide indents: few escapes per byte, the scanner's other path
)
def test_scanner_counts_depth_exactly_however_the_body_is_cut(value, cuts, limit, indent):
    body = json.dumps(value, ensure_ascii=False, indent=indent).encode()
    depth = reference_depth(body.decode())
    scanner = DepthScanner(limit=limit)
    at, refused = 0, False
    try:
        for size in [*cuts, len(body)]:
            scanner.feed(body[at : at + size], last=at + size >= len(body))
            at += size
            if at >= len(body):
                break
    except BodyError:
        refused = True
    assert refused == (depth > limit)
    if not refused:
        assert scanner.depth == 0


def test_scanner_is_linear_on_a_string_full_of_escaped_quotes():
    """A body that opens a string and never closes it, 20 MB of ``\\"``: each chunk's cut-off
    string is tried once (a regex retrying at every escaped quote would take hours)."""
    scanner = DepthScanner()
    body = b'{"a": "' + b'\\"' * 10_000_000
    for at in range(0, len(body), 65536):
        scanner.feed(body[at : at + 65536])
    assert scanner.depth == 1


def test_forms_are_not_scanned(api: Api):
    """A form (the browser's and LabelX's sign-in, served by the same app) is decoded by a parser
    that does not recurse, and may carry a binary file: never refused as nested or not UTF-8."""
    for content_type, body in (
        ("application/x-www-form-urlencoded", b"next=" + b"[" * 1000),
        (
            "multipart/form-data; boundary=x",
            b'--x\r\nContent-Disposition: form-data; name="f"\r\n\r\n\x00' + b"[" * 1000,
        ),
    ):
        r = api.client.post(
            "/v1/datasets", content=body, headers={**api.as_("admin"), "Content-Type": content_type}
        )
        assert r.status_code < 500 and "nested deeper" not in r.text and "NUL" not in r.text, r.text
