"""LabelX's OpenAPI describes every JSON body it takes and gives, and bodies that do not fit
their model are bad input (400) in LabelX's error shape, with nothing stored."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.labelx.conftest import Session, ok

BODY_METHODS = ("post", "put", "patch")
# operations that answer with something other than a JSON document
NOT_JSON = {("get", "/api/projects/{project_id}/export/{fmt}"), ("get", "/api/items/{item_id}/image")}
# the pre-annotation upload is a JSON-lines file, read raw
RAW_BODY = {("post", "/api/projects/{project_id}/suggestions")}


def _resolve(spec: dict, schema: dict) -> dict:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def test_every_json_operation_has_request_and_response_schemas(app):
    spec = TestClient(app).get("/api/openapi.json").json()
    checked = 0
    for path, ops in spec["paths"].items():
        if not path.startswith("/api/"):
            continue
        for method, op in ops.items():
            if (method, path) in NOT_JSON:
                continue
            checked += 1
            where = f"{method.upper()} {path}"
            if method in BODY_METHODS and (method, path) not in RAW_BODY and "{item_id}/release" not in path:
                takes_body = not path.endswith(("/take-task", "/submit", "/claim"))
                if takes_body:
                    body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
                    assert _resolve(spec, body.get("schema", {})).get("properties"), where
            success = next(v for k, v in op["responses"].items() if k.startswith("2"))
            schema = success.get("content", {}).get("application/json", {}).get("schema", {})
            assert schema not in ({}, None), f"{where}: response schema is a bare {{}}"
            target = _resolve(spec, schema.get("items", schema))
            assert target.get("properties"), f"{where}: response has no described fields"
    assert checked >= 20


def test_a_body_that_does_not_fit_its_model_is_400_and_stores_nothing(app):
    admin = Session(app, "admin")
    bad = [
        {"name": "p1", "dataset": "pets", "schema": {"classes": ["a"]}, "task_size": "6"},
        {"name": "p1", "dataset": "pets", "schema": {"classes": ["a"]}, "task_size": True},
        {"name": "p1", "dataset": "pets", "schema": ["not", "an", "object"]},
        {"name": 5, "dataset": "pets", "schema": {"classes": ["a"]}},
    ]
    for body in bad:
        resp = admin.post("/api/projects", body)
        assert resp.status_code == 400, (body, resp.text)
        assert resp.json()["error"]["code"] == "invalid_input" and resp.json()["error"]["message"]
    not_json = admin.send(
        "POST", "/api/projects", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_input"
    assert ok(admin.get("/api/projects")) == []


def test_a_chunked_body_over_the_limit_is_413(app, env):
    admin = Session(app, "admin")
    limit = env.config.api.max_body_bytes

    def chunks():
        yield b'{"description": "'
        yield b"x" * (limit + 1)
        yield b'"}'

    resp = admin.send("POST", "/api/tokens", content=chunks(), headers={"content-type": "application/json"})
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "payload_too_large"


def test_an_id_or_version_beyond_sqlite_integers_is_400_not_500(app):
    """Found by the schemathesis run: such numbers overflowed deep in a SQLite query."""
    admin = Session(app, "admin")
    huge = 2**63
    for path in (f"/api/projects/{huge}", f"/api/tasks/{huge}", f"/projects/{huge}"):
        resp = admin.get(path)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_input", path
    resp = admin.put(f"/api/items/{huge}", {"version": 1, "value": "cat"})
    assert resp.status_code == 400
    resp = admin.put("/api/items/1", {"version": huge, "value": "cat"})
    assert resp.status_code == 400 and "version" in resp.json()["error"]["message"]


def test_error_answers_are_documented_in_the_error_shape(app):
    spec = TestClient(app).get("/api/openapi.json").json()
    op = spec["paths"]["/api/items/{item_id}"]["put"]
    for status in ("400", "403", "404", "409", "413"):
        schema = _resolve(spec, op["responses"][status]["content"]["application/json"]["schema"])
        assert "error" in schema["properties"], status
    admin = Session(app, "admin")
    body = admin.put("/api/items/424242", {"version": 1, "value": "cat"}).json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"])
