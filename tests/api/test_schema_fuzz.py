"""Schemathesis against the datahub API: generated requests never cause a server error, and
every answer matches the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Api
from tests.schema_fuzz import fuzz


def integers_as_integers(value: Any) -> Any:
    """A float with no fraction (``0.0``) becomes the integer it equals, anywhere in the body.

    The one rule of the API that JSON Schema cannot express: OpenAPI 3.1 (JSON Schema 2020-12)
    counts ``7.0`` as an ``integer``, while the API takes only integer literals (issue 24 item
    6: strict types, so ``"size": 7.0`` is 422, never stored as 7; the API description says
    so). The case stays schema-valid: ``7`` is valid wherever ``7.0`` is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integers_as_integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integers_as_integers(v) for v in value]
    return value


def steer(case: Any) -> None:
    if isinstance(case.body, dict | list):
        case.body = integers_as_integers(case.body)


def test_api_answers_match_the_schema_and_never_500(api: Api):
    failures = fuzz(api.client.app, "/openapi.json", api.as_("admin"), max_examples=25, prepare=steer)
    assert not failures, "\n\n".join(failures)


def test_the_steering_changes_only_integral_floats():
    """To the integers they equal (tests/api/test_strict_types.py holds the server to refusing
    them)."""
    body = {"base": 0.0, "changes": [{"op": "put", "record": {"size": 7.0, "meta": {"x": 1.5}}}]}
    assert integers_as_integers(body) == {
        "base": 0,
        "changes": [{"op": "put", "record": {"size": 7, "meta": {"x": 1.5}}}],
    }
    assert type(integers_as_integers(body)["base"]) is int
