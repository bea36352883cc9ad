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
