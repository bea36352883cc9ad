"""A wrong method on an existing path is 405 in the error shape, with ``Allow`` naming the
methods the path does accept (RFC 9110 §15.5.6), so a client can correct itself."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api


def allowed(resp) -> set[str]:
    return {m.strip() for m in resp.headers["allow"].split(",")}


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("DELETE", "/healthz", {"GET"}),
        ("PUT", "/v1/datasets/pets/commits", {"POST"}),
        ("PATCH", "/v1/datasets/pets/tags/nosuch", {"PUT", "DELETE"}),
        ("DELETE", "/v1/datasets/pets", {"GET", "PATCH"}),
    ],
)
def test_wrong_method_is_405_with_allow(api: Api, method: str, path: str, expected: set[str]):
    resp = api.client.request(method, path, headers=api.as_("admin"))
    assert resp.status_code == 405, resp.text
    assert expected <= allowed(resp) and method not in allowed(resp)
    err = resp.json()["error"]
    assert err["code"] == "method_not_allowed" and err["message"]
