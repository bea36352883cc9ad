"""caller34: a page of the same site on another port cannot sign the person in to its account.

SameSite=Strict keeps out other sites, but 127.0.0.1:<another port> (a notebook, a dev server,
any local program's page) is the same site as LabelX on 127.0.0.1: Chromium sends LabelX's
cookies with that page's form posts, and the page may write cookies LabelX reads (a cookie's
scope is the host, not the port). So it planted ``labelx_login_csrf`` with a value of its own,
posted the login form with that value and its own account, and the person's browser was signed
in to the attacker's account (login CSRF): what the person labelled afterwards was the
attacker's. The dataset browser's sign-in checked ``Origin`` already; LabelX's login now does
too (``datahub.web.forms``). Driven for real: headless Chromium, two origins, the attacker's
page with its own script, the person signed in first.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from datahub.cli.serve_cmd import build_app
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env, serving
from tests.browser.labelx_signin import type_sign_in
from tests.labelx.conftest import PASSWORD, add_users


@contextmanager
def attacker_site(html: str) -> Iterator[str]:
    """``html`` served at / of another port of 127.0.0.1: an origin of the same site."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def forged_login(target: str, auth) -> str:
    """The attacker's page: plant the login form's cookie, post the form with it and the
    attacker's own account, at once. The cookie has the name and the instance id LabelX's own
    has (caller72: its name and every token carry them; both are in any request the host's
    pages send, so an attacker serving a page there can read them)."""
    planted = f"{auth.instance}.planted"
    return f"""<!doctype html><html lang="en"><title>cute cats</title>
<form method="post" action="{target}/labelx/login">
<input name="name" value="mallory"><input name="password" value="{PASSWORD}">
<input name="csrf" value="{planted}"><input name="next" value="/">
</form>
<script>document.cookie = "{auth.login_csrf_cookie}={planted}; path=/labelx"; document.forms[0].submit();</script>
</html>"""


def who_is_signed_in(c: Chrome, base: str) -> str:
    c.driver.get(f"{base}/labelx/api/me")
    return json.loads(c.driver.execute_script("return document.body.innerText"))["name"]


@pytest.mark.parametrize("local_mode", [True, False], ids=["local-mode", "auth"])
def test_a_same_site_page_cannot_sign_the_person_in_to_its_account(
    chrome: Chrome,  # noqa: F811 - the fixture
    env: Env,
    local_mode: bool,
) -> None:
    """In local mode (``make run``) too: a page of 127.0.0.1 is a local caller to it."""
    env.config.api.local_mode = local_mode
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    labelx = next(r.app for r in app.routes if getattr(r, "path", "") == "/labelx")
    add_users(labelx, alice="annotator", mallory="annotator")
    try:
        with serving(app) as base:
            chrome.visit(f"{base}/labelx/login", axe=False)
            type_sign_in(chrome, "alice", PASSWORD)
            assert who_is_signed_in(chrome, base) == "alice"
            with attacker_site(forged_login(base, labelx.state.labelx.auth)) as evil:
                assert evil.split(":")[1] == base.split(":")[1] and evil != base  # same host, other port
                chrome.driver.get(evil)
                # the form's answer is loaded (a page of LabelX's origin either way)
                chrome.until(
                    lambda d: (
                        d.current_url.startswith(base)
                        and d.execute_script("return document.readyState === 'complete'")
                    )
                )
            assert who_is_signed_in(chrome, base) == "alice", "the attacker's page signed alice in as mallory"
    finally:
        labelx.state.labelx.store.close()
        cache.close()


def test_a_same_site_page_cannot_swap_its_session_cookie_in(chrome: Chrome, env: Env) -> None:  # noqa: F811
    """Without the form: the page writes its own LabelX session (the attacker signed in
    elsewhere) as ``labelx_session`` with ``Path=/``. The browser sends it after LabelX's own
    (``Path=/labelx``), and LabelX read the last one: alice, signed in, was working as mallory.
    Two session cookies are now refused and both expired, and alice signs in again."""
    env.config.api.local_mode = False
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    labelx = next(r.app for r in app.routes if getattr(r, "path", "") == "/labelx")
    add_users(labelx, alice="annotator", mallory="annotator")
    try:
        with serving(app) as base:
            mallorys, _ = labelx.state.labelx.auth.login("mallory", PASSWORD)
            name = labelx.state.labelx.auth.session_cookie  # labelx_session_<instance> (caller44)
            chrome.visit(f"{base}/labelx/login", axe=False)
            type_sign_in(chrome, "alice", PASSWORD)
            assert who_is_signed_in(chrome, base) == "alice"
            page = f"""<!doctype html><html lang="en"><title>cute cats</title><script>
document.cookie = "{name}={mallorys}; path=/"; location.href = "{base}/labelx/";
</script></html>"""
            with attacker_site(page) as evil:
                chrome.driver.get(evil)
                chrome.until(lambda d: d.current_url.startswith(base) and "/login" in d.current_url)
            chrome.driver.get(f"{base}/labelx/api/me")  # opened as a page: the login form, not mallory's
            chrome.until(lambda d: "/login" in d.current_url)
            assert "mallory" not in chrome.find("body").text
            chrome.visit(f"{base}/labelx/login", axe=False)  # the planted cookie is gone: signs in again
            type_sign_in(chrome, "alice", PASSWORD)
            assert who_is_signed_in(chrome, base) == "alice"
    finally:
        labelx.state.labelx.store.close()
        cache.close()
