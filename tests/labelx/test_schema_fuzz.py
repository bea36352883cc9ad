"""Schemathesis against LabelX's JSON API: generated requests never cause a server error, and
every answer matches the OpenAPI schema."""

from __future__ import annotations

from tests.labelx.conftest import Session
from tests.schema_fuzz import fuzz


def test_labelx_answers_match_the_schema_and_never_500(app):
    admin = Session(app, "admin")
    admin.post(
        "/api/projects", {"name": "pets-cls", "dataset": "pets", "schema": {"classes": ["cat", "dog"]}}
    )
    user = app.state.labelx.store.user_by_name("admin")
    token = app.state.labelx.auth.new_token(user, "fuzz")
    failures = fuzz(app, "/api/openapi.json", {"Authorization": f"Bearer {token}"}, max_examples=25)
    assert not failures, "\n\n".join(failures)
