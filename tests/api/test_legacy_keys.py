"""Keys stored before the bidi-control rule (issue 24 item 4): listed and exported, and now also
readable by key, patchable and deletable, through the API; new writes still keep the rule.

The legacy record goes straight into the store, as an older datahub would have written it."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from datahub.catalog.model import Put, Record
from tests.api.conftest import Api
from tests.api.test_bad_input import error

LEGACY = ["img/\u202egpj.exe", "img/zero\u200bwidth.jpg", "img/\u2066iso\u2069.jpg"]


@pytest.fixture
def legacy(api: Api) -> Api:
    records = [Record(k, f"s3://b/{i}", f"e{i}", 1, "", {}, {"class": "cat"}) for i, k in enumerate(LEGACY)]
    api.catalog.store.commit("pets", 1, [Put(r) for r in records])
    return api


def record_url(key: str, ref: str = "latest") -> str:
    return f"/v1/datasets/pets/versions/{ref}/records/{quote(key)}"


def test_legacy_keys_are_readable_by_key_and_by_prefix(legacy: Api):
    for key in LEGACY:
        r = legacy.get(record_url(key))
        assert r.status_code == 200 and r.json()["key"] == key, r.text
    listed = legacy.get("/v1/datasets/pets/versions/2/records", params={"prefix": "img/\u202e"}).json()
    assert [r["key"] for r in listed["items"]] == ["img/\u202egpj.exe"]


def test_legacy_keys_can_be_patched_and_deleted(legacy: Api):
    patch = {"op": "patch", "key": LEGACY[0], "labels": {"class": "suspicious"}}
    r = legacy.post("/v1/datasets/pets/commits", json={"changes": [patch]})
    assert r.status_code == 201, r.text
    assert legacy.get(record_url(LEGACY[0])).json()["labels"] == {"class": "suspicious"}
    r = legacy.post(
        "/v1/datasets/pets/commits", json={"changes": [{"op": "delete", "key": k} for k in LEGACY]}
    )
    assert r.status_code == 201 and r.json()["removed"] == len(LEGACY), r.text
    for key in LEGACY:
        assert error(legacy.get(record_url(key)), 404)["code"] == "record_not_found"
        assert legacy.get(record_url(key, "2")).status_code == 200  # older versions keep them


def test_new_writes_keep_the_rule(legacy: Api):
    for key in LEGACY:
        put = {"op": "put", "record": {"key": key + ".2", "url": "s3://b/n", "etag": "e", "size": 1}}
        err = error(legacy.post("/v1/datasets/pets/commits", json={"changes": [put]}), 400)
        assert err["code"] == "invalid_key" and "invisible format characters" in err["message"]
    assert legacy.catalog.store.head("pets") == 2


def test_the_schema_says_reads_take_them_and_puts_do_not(api: Api):
    import re

    doc = api.client.app.openapi()
    schemas = doc["components"]["schemas"]
    put_key = schemas["RecordIn"]["properties"]["key"]["pattern"]
    delete_key = schemas["DeleteChange"]["properties"]["key"]["pattern"]
    path = doc["paths"]["/v1/datasets/{name}/versions/{ref}/records/{key}"]["get"]["parameters"]
    read_key = next(p["schema"]["pattern"] for p in path if p["name"] == "key")
    for key in LEGACY:
        assert re.search(read_key, key) and re.search(delete_key, key) and not re.search(put_key, key)
