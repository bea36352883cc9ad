"""A ``?cursor=`` the server did not give, or gave for another listing, is a 400 naming it.

Before, any unpadded base64url string was taken as a position in key order: a cut cursor, a
mistyped one or one made up listed from wherever it decoded to (a silent first page, or a
page that skipped records), and a cursor of one dataset, prefix or filter used on another
skipped every record before its key there. Now the answer is 400 ``invalid_input`` that
names ``cursor`` and says to start again without it; never a traceback.
"""

from __future__ import annotations

import base64

import pytest

from datahub.catalog.model import Put
from tests.api.conftest import PETS_V1, Api, record

RECORDS = "/v1/datasets/pets/versions/1/records"


def refused(resp) -> str:
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["code"] == "invalid_input" and err["details"]["parameter"] == "cursor", err
    assert "cursor" in err["message"] and "start again without ?cursor=" in err["message"], err
    assert "Traceback" not in resp.text
    return err["message"]


def first_cursor(api: Api, path: str = RECORDS, **params: object) -> str:
    body = api.get(path, params={"limit": 3, **params}).json()
    assert body["next_cursor"], body
    return body["next_cursor"]


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        b64(b"img/010.jpg"),  # the old format: a bare key, a made-up position
        "abcd",  # base64url of garbage
        "AAAAAAAAAAAAAAAAAAAAAAAA",
    ],
    ids=["bare-key", "garbage", "zeros"],
)
def test_a_cursor_the_server_did_not_give_is_400(api: Api, cursor: str) -> None:
    assert "not a next_cursor this server gave" in refused(api.get(RECORDS, params={"cursor": cursor}))


def test_a_cut_or_changed_cursor_is_400_not_a_page_from_elsewhere(api: Api) -> None:
    good = first_cursor(api)
    assert [r["key"] for r in api.get(RECORDS, params={"cursor": good, "limit": 1}).json()["items"]] == [
        "img/003.jpg"
    ]
    flipped = good[:5] + ("A" if good[5] != "A" else "B") + good[6:]
    for bad in (good[:-2], flipped, good + "AA"):
        refused(api.get(RECORDS, params={"cursor": bad}))
    refused(api.get(RECORDS, params={"cursor": "%%%"}))  # not base64url at all: as before, 400


def test_a_cursor_of_another_listing_is_400(api: Api) -> None:
    api.catalog.create_dataset("birds", owner="owner", acl={"alice": "reader"})
    api.catalog.commit("birds", (Put(r) for r in PETS_V1), message="v1", author="owner")
    api.catalog.commit("pets", [Put(record("img/999.jpg"))], message="v2", author="owner")
    cursor = first_cursor(api)  # pets@1, every record
    elsewhere = [
        ("/v1/datasets/birds/versions/1/records", {}),  # another dataset
        ("/v1/datasets/pets/versions/2/records", {}),  # another version
        (RECORDS, {"filter": "labels.class=cat"}),  # another filter
        (RECORDS, {"prefix": "img/0"}),  # another prefix
    ]
    for path, params in elsewhere:
        message = refused(api.get(path, params={**params, "cursor": cursor}))
        assert "another listing" in message, (path, params, message)
    # its own listing still pages on, for another caller and another page size as well
    rest = api.get(RECORDS, params={"cursor": cursor, "limit": 100}, who="alice").json()
    assert [r["key"] for r in rest["items"]] == [r.key for r in PETS_V1[3:]]
    filtered = first_cursor(api, filter="labels.class=cat")
    refused(api.get(RECORDS, params={"cursor": filtered}))  # the filter's cursor without it


def test_a_diff_cursor_the_server_did_not_give_is_400(api: Api) -> None:
    api.catalog.commit("pets", [Put(record(f"img/{i:03d}.jpg", "lion")) for i in range(10)], message="v2")
    cursor = first_cursor(api, "/v1/datasets/pets/diff", **{"from": 1, "to": 2})
    page = api.get("/v1/datasets/pets/diff", params={"from": 1, "to": 2, "cursor": cursor}).json()
    assert [e["key"] for e in page["items"]] == [f"img/{i:03d}.jpg" for i in range(3, 10)]
    refused(api.get("/v1/datasets/pets/diff", params={"from": 1, "to": 2, "cursor": b64(b"img/005.jpg")}))


def test_a_diff_cursor_of_another_diff_or_a_records_listing_is_400(api: Api) -> None:
    """A diff's cursor names its diff (dataset, both versions, prefix): on another pair of
    versions it would skip every entry before its key there."""
    api.catalog.commit("pets", [Put(record(f"img/{i:03d}.jpg", "lion")) for i in range(10)], message="v2")
    api.catalog.commit("pets", [Put(record(f"img/{i:03d}.jpg", "tiger")) for i in range(10)], message="v3")
    cursor = first_cursor(api, "/v1/datasets/pets/diff", **{"from": 1, "to": 2})
    for params in ({"from": 2, "to": 3}, {"from": 1, "to": 3}, {"from": 1, "to": 2, "prefix": "img/00"}):
        message = refused(api.get("/v1/datasets/pets/diff", params={**params, "cursor": cursor}))
        assert "another listing" in message, (params, message)
    assert "another listing" in refused(api.get(RECORDS, params={"cursor": cursor}))
