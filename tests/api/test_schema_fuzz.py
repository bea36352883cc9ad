"""Schemathesis against the datahub API: generated requests never cause a server error, and
every answer matches the OpenAPI schema."""

from __future__ import annotations

from typing import Any

from datahub.api.routes.diff import diff_listing
from datahub.api.routes.pagination import at_version, encode_cursor
from datahub.api.routes.records import records_listing
from tests.api.conftest import Api
from tests.schema_fuzz import fuzz


def issued_cursor(case: Any) -> None:
    """A ``cursor`` must be one the server gave for this listing (a check JSON Schema cannot
    say; anything else is 400 naming it): a generated one becomes the cursor the server gives
    after the position its text names, still of the schema's shape."""
    query = case.query or {}
    if not query.get("cursor"):
        return
    params = case.path_parameters or {}
    if case.operation.path.endswith("/records"):
        listing = records_listing(params["name"], params["ref"], query.get("prefix", ""), query.get("filter"))
    else:  # the diff
        listing = diff_listing(
            params["name"],
            str(query.get("from", "")),
            str(query.get("to", "latest")),
            query.get("prefix", ""),
        )
    position = str(query["cursor"])[:200]
    # a position carries its version, a diff's both (at_version)
    position = (
        at_version(1, position)
        if case.operation.path.endswith("/records")
        else at_version(0, at_version(1, position))
    )
    query["cursor"] = encode_cursor(position, listing)


def test_api_answers_match_the_schema_and_never_500(api: Api):
    # No steering: a float with no fraction (``"size": 201.0``), which JSON Schema counts as an
    # integer, is taken as the integer it equals (issue 37 item 8), so every schema-valid case
    # goes out as generated.
    failures = fuzz(api.client.app, "/openapi.json", api.as_("admin"), max_examples=25, prepare=issued_cursor)
    assert not failures, "\n\n".join(failures)
