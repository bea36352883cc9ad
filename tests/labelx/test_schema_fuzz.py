"""Schemathesis against LabelX's JSON API with every check: no server error, answers match the
OpenAPI schema, schema-valid requests are accepted and schema-invalid ones refused."""

from __future__ import annotations

from typing import Any

from tests.labelx.conftest import Session
from tests.schema_fuzz import fuzz

RESERVED_KEYS = set("asunpdbz")  # labelx.schema: the UI's own shortcut keys


def steer_clear_of_unexpressible_rules(case: Any) -> None:
    """Schema-valid POST /api/projects bodies that break a rule JSON Schema cannot say get a
    value that keeps to it (the rules are in the field descriptions, and the server answers
    400 naming them):
    - ``filter`` is a record-filter expression whose grammar a pattern cannot hold: dropped;
    - ``prefix`` is refused by the key rules after its trailing '/' is stripped: dropped;
    - label classes need unique names and shortcut keys, none of them a UI key, ``multi``
      is for classification only, and a multi-label class name holds no ';': such a schema
      becomes two plain classes.
    """
    if case.operation.label != "POST /api/projects" or not isinstance(case.body, dict):
        return
    case.body.pop("filter", None)
    case.body.pop("prefix", None)
    spec = case.body.get("schema")
    if isinstance(spec, dict) and not _keeps_the_class_rules(spec):
        spec["classes"] = ["cat", "dog"]
        spec["multi"] = False


def _keeps_the_class_rules(spec: dict) -> bool:
    classes = [{"name": c} if isinstance(c, str) else c for c in spec["classes"]]
    names = [c["name"].strip() for c in classes]
    keys = [(c.get("key") or str((i + 1) % 10 if i < 10 else "")).lower() for i, c in enumerate(classes)]
    return (
        len(set(names)) == len(names)
        and all(len(n) <= 64 for n in names)
        and all(len(k) == 1 for k in keys)
        and len(set(keys)) == len(keys)
        and not set(keys) & RESERVED_KEYS
        and not (spec.get("multi") and spec.get("kind") == "detection")
        and not (spec.get("multi") and any(";" in n for n in names))
    )


def test_labelx_answers_match_the_schema_and_never_500(app):
    admin = Session(app, "admin")
    admin.post(
        "/api/projects", {"name": "pets-cls", "dataset": "pets", "schema": {"classes": ["cat", "dog"]}}
    )
    user = app.state.labelx.store.user_by_name("admin")
    token = app.state.labelx.auth.new_token(user, "fuzz")
    failures = fuzz(
        app,
        "/api/openapi.json",
        {"Authorization": f"Bearer {token}"},
        max_examples=25,
        prepare=steer_clear_of_unexpressible_rules,
    )
    assert not failures, "\n\n".join(failures)
