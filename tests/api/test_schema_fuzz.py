"""Schemathesis against the datahub API: generated requests never cause a server error, and
every answer matches the OpenAPI schema."""

from __future__ import annotations

from tests.api.conftest import Api
from tests.schema_fuzz import fuzz


def test_api_answers_match_the_schema_and_never_500(api: Api):
    failures = fuzz(api.client.app, "/openapi.json", api.as_("admin"), max_examples=25)
    assert not failures, "\n\n".join(failures)
