"""caller72: ``datahub serve --secure-cookies`` behind a TLS-terminating proxy.

A proxy that serves the pages over https and reaches ``datahub serve`` over plain http leaves
the app seeing http (uvicorn believes ``X-Forwarded-Proto`` only from 127.0.0.1, and datahub
has no trusted-proxy setting). The sign-in cookie was Secure only when the form's POST named an
https page in ``Origin`` (review22b); a request without one (every GET: the sign-in form's own
cookie; a browser or extension that leaves ``Origin`` out of a POST) set its cookie without
``Secure``, so the person's browser later sent it over any ``http://`` address of the host.
``datahub labelx serve`` had ``--secure-cookies``; ``datahub serve`` (the browser, and the
LabelX it serves under ``/labelx``) had nothing. Now ``--secure-cookies`` (``api.secure_cookies``)
makes every sign-in cookie of both Secure, under its ``__Host-`` name, whatever the request.
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from datahub.api.tokens import issue_token
from datahub.browser.session import login_csrf_cookie, session_cookie
from datahub.cli.serve_cmd import build_app
from tests.browser.conftest import make_env
from tests.servers import free_port, wait_for_http

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette prefers httpx2 for its TestClient
    from fastapi.testclient import TestClient


def _secure(set_cookie: str) -> bool:
    return "secure" in [part.strip().lower() for part in set_cookie.split(";")]


def _cookies(response: httpx.Response) -> list[str]:
    return response.headers.get_list("set-cookie")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``datahub --home H serve --auth --secure-cookies`` as an operator starts it behind a proxy."""
    home = tmp_path_factory.mktemp("caller72-secure") / "home"
    port = free_port()
    exe = Path(sys.executable).with_name("datahub")
    argv = [str(exe), "--home", str(home), "serve", "--auth", "--secure-cookies", "--port", str(port)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(proc, f"{url}/healthz")
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_serve_with_secure_cookies_sets_every_form_cookie_secure_over_plain_http(served: str) -> None:
    for page, name in (("/login", "datahub_login_csrf"), ("/labelx/login", "labelx_login_csrf")):
        cookies = _cookies(httpx.get(served + page, timeout=30))  # a GET: no Origin to go by
        assert cookies, page
        for cookie in cookies:
            assert cookie.startswith("__Host-") and _secure(cookie), cookie
        assert any(c.startswith(f"__Host-{name}") for c in cookies), cookies


def test_the_browser_sign_in_is_secure_without_an_origin_and_is_read_back(tmp_path: Path) -> None:
    env = make_env(tmp_path, local_mode=False)
    env.config.api.secure_cookies = True  # what --secure-cookies sets
    token = issue_token(env.catalog.store, "alice")[0]
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=False)
    try:
        client = TestClient(app, base_url="http://127.0.0.1")  # the proxy's plain-http hop
        form = client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)[1]
        names = app.state.services  # datahub_*_<instance> (caller73)
        held = f"__Host-{login_csrf_cookie(names)}={csrf}"
        signed = client.post(
            "/login",
            data={"token": token, "csrf": csrf},
            headers={"Cookie": held},  # as the browser sends it back over https
            follow_redirects=False,
        )
        assert signed.status_code == 303 and signed.headers["location"] == "/", signed.text
        session = next(c for c in _cookies(signed) if f"{session_cookie(names)}=" in c)
        assert session.startswith(f"__Host-{session_cookie(names)}=") and _secure(session), session
        value = session.split(";", 1)[0]
        page = TestClient(app, base_url="http://127.0.0.1").get(
            "/", headers={"Cookie": value}, follow_redirects=False
        )
        assert page.status_code == 200 and "alice" in page.text, page.status_code
    finally:
        cache.close()
        env.stores.close()
        env.catalog.close()
