"""LabelX: a wrong method on an existing path is 405 in LabelX's error shape, with ``Allow``
naming the methods the path accepts (RFC 9110 §15.5.6)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("DELETE", "/api/me", {"GET"}),
        ("DELETE", "/api/projects", {"GET", "POST"}),
        ("POST", "/api/items/1", {"PUT"}),
    ],
)
def test_wrong_method_is_405_with_allow(app, method: str, path: str, expected: set[str]):
    resp = TestClient(app, base_url="http://127.0.0.1").request(method, path)
    assert resp.status_code == 405, resp.text
    allow = {m.strip() for m in resp.headers["allow"].split(",")}
    assert expected <= allow and method not in allow
    err = resp.json()["error"]
    assert err["code"] == "method_not_allowed" and path in err["message"]
