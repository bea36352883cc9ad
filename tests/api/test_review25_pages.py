"""review25: the pages of a records listing of ``latest`` or a tag are one version's.

Each page resolved the ref again, so a commit (or the tag moved) between two pages gave a
listing no version has: the first pages from one version, the rest from the next, and a key
renamed from the back to the front of the listing was on no page. A cursor now carries the
version its first page resolved, and the listing goes on in it."""

from __future__ import annotations

import pytest

from datahub.catalog.model import Delete, Put
from tests.api.conftest import PETS_V1, Api, record

KEYS = [r.key for r in PETS_V1]


@pytest.mark.parametrize("ref", ["latest", "prod"])
def test_a_listing_of_an_unpinned_ref_stays_in_the_version_of_its_first_page(api: Api, ref: str) -> None:
    api.catalog.tag("pets", "prod", 1)
    path = f"/v1/datasets/pets/versions/{ref}/records"
    first = api.get(path, params={"limit": 10}).json()
    assert [r["key"] for r in first["items"]] == KEYS[:10]
    # between two pages: the last key renamed to the front, and the tag moved to that version
    api.catalog.commit(
        "pets", [Delete(KEYS[-1]), Put(record("img/000a.jpg"))], message="rename", author="owner"
    )
    api.catalog.tag("pets", "prod", 2)
    keys = [r["key"] for r in first["items"]]
    cursor = first["next_cursor"]
    while cursor:
        body = api.get(path, params={"limit": 10, "cursor": cursor}).json()
        keys += [r["key"] for r in body["items"]]
        cursor = body["next_cursor"]
    assert keys == KEYS  # version 1's listing, whole (before: KEYS[-1] was on no page)
    fresh = [r["key"] for r in api.get(path, params={"limit": 100}).json()["items"]]
    assert fresh == sorted([*KEYS[:-1], "img/000a.jpg"])  # a new listing: the new version


@pytest.mark.parametrize("to", ["latest", "prod"])
def test_a_diff_to_an_unpinned_ref_stays_between_the_versions_of_its_first_page(api: Api, to: str) -> None:
    api.catalog.tag("pets", "prod", 1)
    path = "/v1/datasets/pets/diff"
    first = api.get(path, params={"from": 0, "to": to, "limit": 10}).json()
    api.catalog.commit(
        "pets", [Delete(KEYS[-1]), Put(record("img/000a.jpg"))], message="rename", author="owner"
    )
    api.catalog.tag("pets", "prod", 2)
    keys = [e["key"] for e in first["items"]]
    cursor = first["next_cursor"]
    while cursor:
        body = api.get(path, params={"from": 0, "to": to, "limit": 10, "cursor": cursor}).json()
        keys += [e["key"] for e in body["items"]]
        cursor = body["next_cursor"]
    assert keys == KEYS  # the diff 0 -> 1, whole (before: KEYS[-1] was on no page)
