"""Each rule the schemathesis run found missing from LabelX's OpenAPI is now in it, equals the
rule the server applies, and a request that keeps to it is taken (state conflicts are 409)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from datahub.validation import NAME_PATTERN
from datahub.web.images import PREVIEW_SIZES
from labelx.auth import MIN_PASSWORD
from labelx.entities import ROLES
from labelx.models import NOT_BLANK, ItemSave
from labelx.schema import KINDS
from labelx.service import MAX_TASK_SIZE
from tests.labelx.conftest import Session, make_project, ok


def _spec(app) -> dict:
    return TestClient(app).get("/api/openapi.json").json()


def _schema(spec: dict, name: str) -> dict:
    return spec["components"]["schemas"][name]


def _param(spec: dict, path: str, name: str) -> dict:
    return next(p for p in spec["paths"][path]["get"]["parameters"] if p["name"] == name)["schema"]


def test_enums_and_limits_equal_the_servers(app):
    spec = _spec(app)
    user = _schema(spec, "UserCreate")["properties"]
    assert set(user["role"]["enum"]) == set(ROLES)
    assert user["name"]["pattern"] == NAME_PATTERN and user["password"]["minLength"] == MIN_PASSWORD
    project = _schema(spec, "ProjectCreate")["properties"]
    assert project["task_size"]["minimum"] == 1 and project["task_size"]["maximum"] == MAX_TASK_SIZE
    assert set(project["assign"]["enum"]) == {"round-robin", "claim"}
    assert set(_schema(spec, "LabelSchemaSpec")["properties"]["kind"]["enum"]) == set(KINDS)
    size = _param(spec, "/api/items/{item_id}/image", "size")
    assert set(size["enum"]) == {*PREVIEW_SIZES, "original"}
    export = "/api/projects/{project_id}/export/{fmt}"
    assert set(_param(spec, export, "fmt")["enum"]) == {"csv", "coco", "yolo"}
    assert set(_param(spec, export, "include")["enum"]) == {"accepted", "annotated"}


def test_not_blank_is_pythons_strip(app):
    """The pattern for "not blank" keeps exactly the strings that str.strip() leaves non-empty."""
    for code in range(0x3100):
        c = chr(code)
        assert bool(re.search(NOT_BLANK, c)) is (c.strip() != ""), hex(code)


def test_non_json_routes_document_their_content_types_and_pages_are_not_api(app):
    spec = _spec(app)
    image = spec["paths"]["/api/items/{item_id}/image"]["get"]["responses"]["200"]["content"]
    assert set(image) == {"image/jpeg", "application/octet-stream"}
    export = spec["paths"]["/api/projects/{project_id}/export/{fmt}"]["get"]["responses"]["200"]
    assert set(export["content"]) == {"text/csv", "application/json", "application/zip"}
    assert not [p for p in spec["paths"] if not p.startswith("/api/")]  # HTML pages and /login


def test_a_whole_number_written_as_a_float_is_an_integer():
    """JSON Schema's "integer" admits 3.0, so the server takes it; 3.5, "3" and true stay out."""
    assert ItemSave.model_validate({"version": 3.0}).version == 3
    for bad in (3.5, "3", True, 2.0**53):
        try:
            ItemSave.model_validate({"version": bad})
        except ValueError:
            continue
        raise AssertionError(f"version {bad!r} was taken")


def test_schema_rules_are_enforced_and_valid_requests_taken(app):
    admin = Session(app, "admin")
    assert admin.post("/api/users", {"name": "eve", "role": "boss", "password": "x" * 8}).status_code == 400
    assert admin.post("/api/users", {"name": "eve", "password": "short"}).status_code == 400
    ok(admin.post("/api/users", {"name": "eve", "role": "reviewer", "password": "x" * 8}), 201)
    assert admin.get("/api/projects/1/export/pdf").status_code == 400
    project = make_project(admin, task_size=6.0)  # a whole float is an integer
    assert project["task_size"] == 6
    assert (
        admin.post("/api/projects", {"name": "p2", "dataset": "pets", "schema": {"classes": []}}).status_code
        == 400
    )
    classes = [{"name": "cat", "key": "c", "color": "#AABBCC"}, "dog"]
    ok(admin.post("/api/projects", {"name": "p3", "dataset": "pets", "schema": {"classes": classes}}), 201)
    spec = _spec(app)
    review = _schema(spec, "ItemReview")
    assert {"required": ["accept"], "properties": {"accept": {"const": True}}} in review["anyOf"]


def test_state_conflicts_are_409_not_400(app):
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    alice = Session(app, "alice")
    commit = admin.post(f"/api/projects/{pid}/commit", {})
    assert (
        commit.status_code == 409 and "no accepted label left to commit" in commit.json()["error"]["message"]
    )
    assert admin.get(f"/api/projects/{pid}/export/yolo").status_code == 409  # a classification project
    tasks = ok(alice.get(f"/api/projects/{pid}/tasks"))
    tid = next(t["id"] for t in tasks if t["assignee"] == "alice")
    early = alice.post(f"/api/tasks/{tid}/submit")
    assert early.status_code == 409 and "to label" in early.json()["error"]["message"]


def test_a_refused_name_is_explained_in_words(app):
    """Issue 37 item 4: a bad project or user name came back as pydantic's raw text, "String
    should match pattern '^[a-z0-9][a-z0-9._-]{0,62}$'"."""
    admin = Session(app, "admin")
    body = {"name": "Bad Name", "dataset": "pets", "schema": {"kind": "classification", "classes": ["cat"]}}
    r = admin.post("/api/projects", body)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert message == (
        "invalid request: name: 'Bad Name': use 1-63 characters from a-z, 0-9, '.', '_' and '-', "
        "starting with a letter or digit"
    )
    r = admin.post("/api/users", {"name": "-x", "role": "annotator", "password": "x" * 20})
    assert r.status_code == 400 and "String should match" not in r.text and "use 1-63 characters" in r.text
