"""The checked-in docs/openapi.json is exactly what the app serves (regenerate: python -m datahub.api.openapi)."""

from __future__ import annotations

import json
from pathlib import Path

from datahub.api.openapi import openapi_document
from tests.api.conftest import Api

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_checked_in_openapi_matches_the_app():
    assert json.loads(DOC.read_text()) == openapi_document(), (
        "docs/openapi.json is stale: run .venv/bin/python -m datahub.api.openapi > docs/openapi.json"
    )


def test_served_openapi_is_the_same_document(api: Api):
    served = api.client.get("/openapi.json").json()
    assert served == openapi_document()
    assert "/v1/datasets/{name}/commits" in served["paths"]
    assert "CommitCreate" in served["components"]["schemas"]


def _params(doc: dict) -> list[tuple[str, str, dict]]:
    return [
        (f"{method} {path}", p["name"], p["schema"])
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        for p in op.get("parameters", [])
        if p["name"] in ("name", "tag", "ref", "key", "from", "to")
    ]


def test_names_tags_refs_and_keys_carry_the_servers_patterns_and_lengths():
    """Issue 15: the schema says exactly what the server enforces (datahub.validation)."""
    from datahub import validation as v

    doc = openapi_document()
    wanted = {
        "name": (v.NAME_PATTERN, 63),
        "tag": (v.TAG_PATTERN, 63),
        "ref": (v.REF_PATTERN, 63),
        "from": (v.REF_PATTERN, 63),
        "to": (v.REF_PATTERN, 63),
        "key": (v.KEY_PATTERN, v.MAX_KEY_BYTES),
    }
    params = _params(doc)
    assert {name for _, name, _ in params} == set(wanted)
    for path, name, schema in params:
        if path.startswith("delete ") and name == "tag":  # a tag stored before the rule can go
            assert (schema["pattern"], schema["maxLength"]) == ("^" + v.TAG_RE.pattern + "$", 63)
            continue
        assert (schema.get("pattern"), schema.get("maxLength")) == wanted[name], (path, name)
    schemas = doc["components"]["schemas"]
    assert schemas["DatasetCreate"]["properties"]["name"]["pattern"] == v.NAME_PATTERN
    for model in ("DeleteChange", "PatchChange"):  # keys a version may hold (issue 24 item 4)
        assert schemas[model]["properties"]["key"]["pattern"] == v.KEY_PATTERN
    assert schemas["RecordIn"]["properties"]["key"]["pattern"] == v.NEW_KEY_PATTERN  # keys a put may add
    record = schemas["RecordIn"]["properties"]
    assert record["size"]["maximum"] == v.MAX_SIZE and record["etag"]["minLength"] == 1
    assert schemas["CommitCreate"]["properties"]["changes"]["minItems"] == 1
    assert schemas["TagSet"]["properties"]["ref"]["pattern"] == v.REF_PATTERN


def test_schema_valid_values_are_accepted_and_invalid_ones_refused(api: Api):
    """The patterns are not decoration: a schema-valid tag is stored, a schema-invalid one is 400."""
    import re

    from datahub import validation as v

    for tag, ok in [("golden", True), ("v3", False), ("latest", False), ("v3-rc", True)]:
        assert bool(re.fullmatch(v.TAG_PATTERN, tag)) is ok
        r = api.put(f"/v1/datasets/pets/tags/{tag}", json={"ref": 1})
        assert r.status_code == (200 if ok else 400), (tag, r.text)


def test_access_lists_and_owners_carry_the_principal_rule(api: Api):
    """Schemathesis found acl keys like "" schema-valid yet refused: the rule is in the schema now."""
    import re

    from datahub.validation import ACL_PRINCIPAL_PATTERN

    schemas = openapi_document()["components"]["schemas"]
    acl = schemas["DatasetCreate"]["properties"]["acl"]
    key_rule = acl["propertyNames"]["pattern"]
    assert key_rule == ACL_PRINCIPAL_PATTERN
    owner = next(
        s for s in schemas["DatasetUpdate"]["properties"]["owner"]["anyOf"] if s.get("type") == "string"
    )
    for i, (principal, valid) in enumerate(
        (
            ("*", True),
            ("svc.bot@team+1", True),
            ("system:serviceaccount:team-a:trainer", True),
            ("system:serviceaccount:team-a:trainer.v2", True),
            ("", False),
            ("-x", False),
            ("a b", False),
            ("<b>x</b>", False),
            ("alice\u202e", False),
            ("a" * 200, False),
            ("system:serviceaccount:Team-A:trainer", False),
            ("system:serviceaccount:team-a:", False),
            ("system:serviceaccount:team-a:trainer:x", False),
        )
    ):
        assert bool(re.fullmatch(key_rule, principal)) is valid
        r = api.post("/v1/datasets", json={"name": f"acl{i}", "acl": {principal: "reader"}})
        assert r.status_code == (201 if valid else 400), (principal, r.text)
        if principal != "*":
            assert bool(re.fullmatch(owner["pattern"], principal)) is valid


def test_record_urls_carry_the_storage_rule(api: Api):
    """Schemathesis found url "s3://" schema-valid yet refused: the record URL pattern is now
    the rule datahub.storage.split_object_url applies, and the two agree on every sample."""
    import re

    from datahub.api.schemas import RECORD_URL_PATTERN

    rule = openapi_document()["components"]["schemas"]["RecordIn"]["properties"]["url"]["pattern"]
    assert rule == RECORD_URL_PATTERN
    api.post("/v1/datasets", json={"name": "urls"})
    for i, (url, valid) in enumerate(
        (
            ("s3://b/k", True),
            ("S3://b/any key?with#odd%chars\n", True),
            ("s3://b/../x", True),  # S3 keys datahub did not write may be anything
            ("memory://m/a/b.jpg", True),
            ("file:///data/a.jpg", True),
            ("file://localhost/data/a.jpg", True),
            ("s3://", False),
            ("s3://b", False),
            ("s3://b/", False),
            ("s3://b/dir/", False),
            ("s3://b%/k", False),
            ("memory://m/a/../b", False),
            ("memory://m/a?b", False),
            ("file://host/a", False),
            ("file:///a/./b", False),
            ("file:///a\x01b", False),
            ("http://b/k", False),
        )
    ):
        assert bool(re.fullmatch(rule, url)) is valid, url
        record = {"key": f"r{i}", "url": url, "etag": "e", "size": 1}
        r = api.post("/v1/datasets/urls/commits", json={"changes": [{"op": "put", "record": record}]})
        assert r.status_code == (201 if valid else 400), (url, r.text)


def test_if_match_carries_the_one_tag_rule_and_412_is_documented(api: Api):
    """Schemathesis found If-Match "a,b" schema-valid yet refused, and 412 undocumented."""
    import re

    from datahub.api.routes.datasets import IF_MATCH_PATTERN

    patch = openapi_document()["paths"]["/v1/datasets/{name}"]["patch"]
    header = next(p for p in patch["parameters"] if p["name"].lower() == "if-match")
    assert header["schema"]["pattern"] == IF_MATCH_PATTERN and "412" in patch["responses"]
    api.post("/v1/datasets", json={"name": "im"})
    etag = api.client.get("/v1/datasets/im", headers=api.as_("admin")).headers["ETag"]
    for header_value, status in (
        (etag, 200),
        ("*", 200),
        (" , * ,", 412),  # '*' inside a list is just a tag that matches nothing
        ("garbage", 412),  # well formed, names no revision
        ('"r1", "r2"', 400),
        (" , ", 400),
    ):
        assert bool(re.fullmatch(IF_MATCH_PATTERN, header_value)) is (status != 400), header_value
        r = api.client.patch(
            "/v1/datasets/im", headers={**api.as_("admin"), "If-Match": header_value}, json={}
        )
        assert r.status_code == status, (header_value, r.text)
