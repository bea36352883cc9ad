"""review22b: a sign-in sent from an https page gets a Secure cookie, behind any TLS proxy.

``datahub serve`` is put behind a TLS-terminating proxy (an ingress) that talks plain http to
it. uvicorn believes such a proxy's ``X-Forwarded-Proto`` only from 127.0.0.1, so a proxy on
another host left the app seeing http, and both sign-ins set their cookie without ``Secure``:
the dataset browser's ``datahub_session`` (the API token itself, which never expires) and
LabelX's ``labelx_session``. A person using ``https://`` only still had the browser send them
over plain http to any ``http://`` address of that host (a link, a typed name without HSTS,
a redirect an attacker on the network injects), in the clear for that attacker. ``labelx serve``
had ``--secure-cookies`` for this; ``datahub serve`` had nothing. The sign-in form is posted
by the person's browser, which names the page it was on in ``Origin``: https there means the
browser talks https to this site, so the cookie is Secure whatever the hop behind the proxy.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator

import pytest

from datahub.api.tokens import issue_token
from datahub.browser.session import session_cookie
from datahub.cli.serve_cmd import build_app
from tests.browser.conftest import make_env
from tests.labelx.conftest import PASSWORD, add_users

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette prefers httpx2 for its TestClient
    from fastapi.testclient import TestClient

HTTPS_PAGE = "https://127.0.0.1"  # the page the form was on, as the person's browser names it


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, str]]:
    """``datahub serve --auth``'s app (browser and LabelX), reached over plain http as a proxy
    on another host reaches it; alice's API token and LabelX account."""
    env = make_env(tmp_path_factory.mktemp("review22b") / "h", local_mode=False)
    token = issue_token(env.catalog.store, "alice")[0]
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    labelx = next(r.app for r in app.routes if getattr(r, "path", "") == "/labelx")
    add_users(labelx, alice="annotator")
    try:
        yield app, token
    finally:
        labelx.state.labelx.store.close()
        cache.close()
        env.stores.close()
        env.catalog.close()


def _client(app) -> TestClient:
    return TestClient(app, base_url="http://127.0.0.1")  # the app sees http: the proxy's hop


def _sign_in_browser(app, token: str, origin: str | None) -> str:
    client = _client(app)
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]
    headers = {"Origin": origin} if origin else {}
    resp = client.post("/login", data={"token": token, "csrf": csrf}, headers=headers, follow_redirects=False)
    assert resp.status_code == 303 and resp.headers["location"] == "/", resp.text
    return resp.headers["set-cookie"]


def _sign_in_labelx(app, origin: str | None) -> str:
    client = _client(app)
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/labelx/login").text)[1]
    headers = {"Origin": origin} if origin else {}
    resp = client.post(
        "/labelx/login",
        data={"name": "alice", "password": PASSWORD, "csrf": csrf},
        headers=headers,
        follow_redirects=False,
    )
    assert resp.status_code == 303 and resp.headers["location"] == "/labelx/", resp.text
    return next(
        c
        for c in resp.headers.get_list("set-cookie")
        if c.removeprefix("__Host-").startswith("labelx_session_")  # _<instance> (caller44)
    )


def _secure(set_cookie: str) -> bool:
    return "secure" in [part.strip().lower() for part in set_cookie.split(";")]


def test_the_browser_session_cookie_is_secure_when_signed_in_from_an_https_page(served) -> None:
    app, token = served
    cookie = _sign_in_browser(app, token, HTTPS_PAGE)
    # Secure: __Host- since caller36; the catalog's instance id in the name since caller73
    assert cookie.startswith(f"__Host-{session_cookie(app.state.services)}=")
    assert _secure(cookie), cookie
    assert "httponly" in cookie.lower()


def test_the_labelx_session_cookie_is_secure_when_signed_in_from_an_https_page(served) -> None:
    app, _ = served
    cookie = _sign_in_labelx(app, HTTPS_PAGE)
    assert cookie.startswith("__Host-labelx_session_")
    assert _secure(cookie), cookie
    assert "httponly" in cookie.lower()


def test_plain_http_sign_ins_keep_cookies_a_plain_http_site_can_use(served) -> None:
    """A server reached over http (the in-cluster service, a laptop) still signs people in:
    a browser drops a Secure cookie set over http, so none is set Secure there."""
    app, token = served
    assert not _secure(_sign_in_browser(app, token, "http://127.0.0.1"))
    assert not _secure(_sign_in_browser(app, token, None))
    assert not _secure(_sign_in_labelx(app, "http://127.0.0.1"))
    assert not _secure(_sign_in_labelx(app, None))
