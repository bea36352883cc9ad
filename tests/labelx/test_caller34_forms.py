"""caller34: LabelX's login form is refused when a page of another origin sent it.

The double-submit pair (cookie and form field) is no proof when the sending page could write
the cookie: a page of the same site on another port of the host can (cookies are scoped to the
host, not the port), so it signed the person in to its own account (login CSRF; the Chromium
run is tests/browser/test_caller34_login_csrf.py). The form must come from LabelX's origin.
"""

from __future__ import annotations

import re
import warnings

import pytest

from tests.labelx.conftest import PASSWORD, login_csrf_cookie, session_cookie

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette prefers httpx2 for its TestClient
    from fastapi.testclient import TestClient


def _post_login(app, origin: str | None):
    client = TestClient(app, base_url="http://127.0.0.1:8000")
    # what a same-site page can write: this LabelX's own name and instance id (caller72), which
    # any request the host's pages send carries
    planted = f"{app.state.labelx.auth.instance}.planted"
    client.cookies.set(login_csrf_cookie(app), planted)
    headers = {"Origin": origin} if origin is not None else {}
    form = {"name": "admin", "password": PASSWORD, "csrf": planted}
    return client.post("/login", data=form, headers=headers, follow_redirects=False)


@pytest.mark.parametrize("origin", ["http://127.0.0.1:9999", "http://localhost:8000", "null"])
def test_a_login_form_sent_from_another_origin_signs_nobody_in(app, origin: str) -> None:
    resp = _post_login(app, origin)
    assert resp.status_code == 403, resp.headers
    assert "labelx_session" not in resp.headers.get("set-cookie", "")
    assert "another site" in resp.text and resp.headers["content-type"].startswith("text/html")


@pytest.mark.parametrize("origin", ["http://127.0.0.1:8000", None])
def test_a_login_form_of_this_origin_or_a_script_still_signs_in(app, origin: str | None) -> None:
    resp = _post_login(app, origin)
    assert resp.status_code == 303 and resp.headers["location"] == "/"
    assert re.search(rf"{session_cookie(app)}=[^;]+;", resp.headers["set-cookie"])


def _sign_in(client, name: str) -> str:
    page = client.get("/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)[1]
    resp = client.post(
        "/login", data={"name": name, "password": PASSWORD, "csrf": csrf}, follow_redirects=False
    )
    assert resp.status_code == 303, resp.text
    return client.cookies[session_cookie(client.app)]


def test_signing_in_again_ends_the_session_the_browser_held(app) -> None:
    """Another person signing in on a shared browser (or the same one again): the session the
    browser held before is over in the store too, not only replaced in the browser, so a copy
    of its cookie opens nothing."""
    client = TestClient(app, base_url="http://127.0.0.1:8000")
    first = _sign_in(client, "admin")
    second = _sign_in(client, "alice")
    assert first != second
    assert client.get("/api/me").json()["name"] == "alice"
    copy = TestClient(app, base_url="http://127.0.0.1:8000")
    copy.cookies.set(session_cookie(app), first)
    assert copy.get("/api/me").status_code == 401


def test_labelx_pages_are_never_kept_by_the_browser(app) -> None:
    """A page holds its session's CSRF token and user name: ``no-store``, as the dataset
    browser's (tests/browser/test_caller34_back_cache.py); the pictures keep their own."""
    client = TestClient(app, base_url="http://127.0.0.1:8000")
    assert client.get("/login").headers["cache-control"] == "no-store"
    away = client.get("/", headers={"Accept": "text/html"}, follow_redirects=False)
    assert away.status_code == 303 and away.headers["cache-control"] == "no-store"
    _sign_in(client, "admin")
    home = client.get("/", headers={"Accept": "text/html"})
    assert home.status_code == 200 and home.headers["cache-control"] == "no-store"
    # nor are its API answers (caller74: a JSON answer opened as a page came back after Sign
    # out, tests/browser/test_caller74_private_cache.py); static files keep the browser's rules
    for path in ("/api/me", "/api/projects", "/api/no-such-route"):
        assert client.get(path).headers["cache-control"] == "no-store", path
    static = client.get("/static/app.css")
    assert static.status_code == 200 and "cache-control" not in static.headers


def test_two_session_cookies_are_refused_and_expired(app) -> None:
    """A second ``labelx_session`` (written by a page of another port of the host, sent after
    LabelX's own) was read instead of the person's; now neither is, and both are expired at
    every path they may have. (Since caller44 the name carries the labelx.db's instance id.)"""
    name = session_cookie(app)
    client = TestClient(app, base_url="http://127.0.0.1:8000")
    mine = _sign_in(client, "alice")
    theirs = _sign_in(TestClient(app, base_url="http://127.0.0.1:8000"), "admin")
    raw = {"Cookie": f"{name}={mine}; {name}={theirs}"}
    plain = TestClient(app, base_url="http://127.0.0.1:8000")
    answer = plain.get("/api/me", headers=raw)
    assert answer.status_code == 401, answer.text
    assert "two LabelX session cookies" in answer.json()["error"]["message"]
    expired = [c for c in answer.headers.get_list("set-cookie") if c.startswith(f"{name}=")]
    assert {re.search(r"Path=([^;]+)", c)[1] for c in expired} >= {"/", "/api", "/api/", "/api/me"}
    assert all("Max-Age=0" in c for c in expired)
    assert plain.get("/api/me", headers={"Cookie": f"{name}={mine}"}).json()["name"] == "alice"
