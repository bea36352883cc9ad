"""LabelX answers a body nested too deep to decode, or not UTF-8, with 400 ``invalid_input``
(issue 24 item 1: it was 400 with the undocumented code ``http_error``), on every JSON route,
and changes nothing."""

from __future__ import annotations

import pytest

from tests.labelx.conftest import Session

ROUTES = [
    ("POST", "/api/users"),
    ("POST", "/api/tokens"),
    ("POST", "/api/projects"),
    ("POST", "/api/projects/1/commit"),
    ("PUT", "/api/tasks/1/assignee"),
    ("PUT", "/api/items/1"),
]


@pytest.mark.parametrize("levels", [1_000, 100_000])
def test_deep_or_undecodable_bodies_are_400_invalid_input(app, levels):
    admin = Session(app, "admin")
    projects = admin.get("/api/projects").json()
    for method, path in ROUTES:
        for body in (b"[" * levels + b"]" * levels, b'{"name": "\xff"}'):
            r = admin.send(method, path, content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (method, path, r.text)
            err = r.json()["error"]
            assert err["code"] == "invalid_input" and path in err["message"], err
    assert admin.get("/api/projects").json() == projects
