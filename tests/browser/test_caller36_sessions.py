"""caller36: the dataset browser's sign-out ends the session on the server, on every catalog store.

The ``datahub_session`` cookie held the person's API token itself, so "Sign out" only deleted it
in that browser: a copy (a shared machine's profile, a proxy log, malware) kept working until the
person revoked the token, which broke their scripts too. A sign-in now opens a browser session
kept beside the tokens (its id's hash, the token's hash, its end): sign-out deletes it, a revoke
of the token ends it at once, and a cookie from before (the raw token) is refused. Driven with
the exact requests a browser sends (Origin, the form's cookie), on SQLite and MongoDB
(mongomock); a server over a remote catalog (``datahub serve --catalog http://...``) checks no
tokens itself, and says so on sign-in as on a bearer request.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.api.tokens import hash_token, issue_token, revoke_token
from datahub.browser import session
from datahub.catalog import Catalog, open_catalog
from datahub.catalog.http_store import HttpCatalogStore
from datahub.cli.serve_cmd import build_app
from datahub.config import load_config
from datahub.storage import StoreRegistry

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette prefers httpx2 for its TestClient
    from fastapi.testclient import TestClient

BASE = "http://127.0.0.1"


def _app(tmp: Path, catalog_url: str):
    config = load_config(
        env={}, overrides={"home": str(tmp / "var"), "catalog_url": catalog_url, "api": {"local_mode": False}}
    )
    catalog = open_catalog(config.resolved_catalog_url)
    stores = StoreRegistry(config)
    app, cache = build_app(config, catalog, stores, labelx=False)
    return app, cache, stores, catalog


@pytest.fixture(params=["sqlite", "mongomock"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[object, Catalog, str]]:
    """``datahub serve --auth``'s app over a SQLite or a MongoDB catalog; alice's API token."""
    url = f"sqlite:///{tmp_path / 'catalog.db'}" if request.param == "sqlite" else "mongomock://x/caller36"
    app, cache, stores, catalog = _app(tmp_path, url)
    token = issue_token(catalog.store, "alice")[0]
    try:
        yield app, catalog, token
    finally:
        cache.close()
        stores.close()
        catalog.close()


def _client(app, cookie: str | None = None) -> TestClient:
    client = TestClient(app, base_url=BASE)
    if cookie is not None:
        client.cookies.set(session.session_cookie(app.state.services), cookie)
    return client


def sign_in(app, token: str) -> tuple[TestClient, str]:
    """A browser's sign-in: the form (its cookie), then the post with the browser's Origin."""
    client = _client(app)
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]
    resp = client.post(
        "/login", data={"token": token, "csrf": csrf}, headers={"Origin": BASE}, follow_redirects=False
    )
    assert resp.status_code == 303 and resp.headers["location"] == "/", resp.text
    return client, client.cookies[session.session_cookie(app.state.services)]


def opens(client: TestClient) -> bool:
    """Whether the datasets page opens (else the login form, saying the sign-in ended)."""
    resp = client.get("/", follow_redirects=False)
    if resp.status_code == 200:
        return True
    assert resp.status_code == 303 and resp.headers["location"].startswith("/login?"), resp.text
    return False


def test_sign_out_ends_every_copy_of_the_cookie(served) -> None:
    app, _, token = served
    browser, cookie = sign_in(app, token)
    copy = _client(app, cookie)  # the cookie taken from a proxy log or a shared profile
    assert opens(browser) and opens(copy)
    csrf = browser.cookies[session.login_csrf_cookie(app.state.services)]
    out = browser.post("/logout", data={"csrf": csrf}, headers={"Origin": BASE}, follow_redirects=False)
    assert out.status_code == 303
    assert not opens(copy), "a copy of the cookie still worked after sign-out"
    resp = copy.get("/", follow_redirects=False)
    assert "error=ended" in resp.headers["location"]  # the login form says why
    assert opens(_client(app, None)) is False
    # the person's scripts keep their token
    assert _client(app).get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_the_cookie_holds_a_session_id_and_the_catalog_only_its_hash(served) -> None:
    app, catalog, token = served
    _, cookie = sign_in(app, token)
    assert token not in cookie and not cookie.startswith("dh_")
    kept = catalog.store.get_browser_session(hash_token(cookie))
    assert kept is not None and kept.token_hash == hash_token(token)
    assert catalog.store.get_browser_session(cookie) is None  # the id itself is nowhere


def test_revoking_the_token_ends_its_browser_sessions_at_once(served) -> None:
    app, catalog, token = served
    browser, _ = sign_in(app, token)
    assert opens(browser)
    revoke_token(catalog.store, token)  # datahub token revoke
    assert not opens(browser)


def test_a_cookie_holding_the_api_token_itself_is_refused(served) -> None:
    """Cookies from before caller36 held the raw token: refused, the person signs in again."""
    app, _, token = served
    resp = _client(app, token).get("/", follow_redirects=False)
    assert resp.status_code == 303 and "error=ended" in resp.headers["location"]


def test_a_session_ends_after_session_seconds(served, monkeypatch: pytest.MonkeyPatch) -> None:
    app, _, token = served
    browser, _ = sign_in(app, token)
    now = session.clock()
    monkeypatch.setattr(session, "clock", lambda: now + session.SESSION_SECONDS + 60)
    assert not opens(browser)


def test_signing_in_again_ends_the_session_the_browser_held(served) -> None:
    """Another person signing in on a shared machine: the first one's cookie (a copy) is out."""
    app, catalog, token = served
    other = issue_token(catalog.store, "bob")[0]
    browser, first = sign_in(app, token)
    csrf = browser.cookies[session.login_csrf_cookie(app.state.services)]
    resp = browser.post(
        "/login", data={"token": other, "csrf": csrf}, headers={"Origin": BASE}, follow_redirects=False
    )
    assert resp.status_code == 303
    assert not opens(_client(app, first))
    assert opens(browser)


def test_a_server_over_a_remote_catalog_says_where_tokens_are_checked(tmp_path: Path) -> None:
    """``datahub serve --catalog http://...`` keeps no tokens (the remote server does): its
    sign-in says so, as a bearer request to its API does, instead of keeping a session."""
    config = load_config(env={}, overrides={"home": str(tmp_path / "var"), "api": {"local_mode": False}})
    catalog = Catalog(HttpCatalogStore("http://127.0.0.1:9"))  # never reached: refused before
    stores = StoreRegistry(config)
    app, cache = build_app(config, catalog, stores, labelx=False)
    try:
        client = _client(app)
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]
        resp = client.post(
            "/login", data={"token": "dh_x", "csrf": csrf}, headers={"Origin": BASE}, follow_redirects=False
        )
        assert resp.status_code == 400 and "on the API server" in resp.text
        assert session.session_cookie(app.state.services) not in resp.cookies
        api = client.get("/v1/datasets", headers={"Authorization": "Bearer dh_x"})
        assert api.status_code == 400 and "on the API server" in api.text
        page = _client(app, "x" * 43).get("/", follow_redirects=False)
        assert page.status_code == 400 and "on the API server" in page.text
    finally:
        cache.close()
        stores.close()
