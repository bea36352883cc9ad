"""caller44: two LabelX servers on one host (two ports, two labelx.db), one browser.

A browser keeps cookies by host, not by port (RFC 6265), so both servers' cookies live in one
jar. Both named their session ``labelx_session`` at ``Path=/``: signing in to one replaced the
other's cookie, so signing in to B signed the person out of A (and under ``datahub serve``,
at ``/labelx``, the two cookies side by side made it refuse both and expire both). Now each
labelx.db's session cookie carries its instance id in its name (``labelx_session_<instance>``)
and every session id starts with it: a cookie of another instance is never looked up, never
refused and never expired. Driven in headless Chromium, both servers over plain http on
127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from labelx.app import create_labelx_app
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import make_env, serving
from tests.browser.labelx_signin import type_sign_in
from tests.labelx.conftest import PASSWORD, add_users


@pytest.fixture
def two_labelx(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(A's URL, B's URL): standalone LabelX servers on two ports, each with its own home and
    labelx.db; alice has an account on A only, bob on B only, and both have ``admin``."""
    envs = [make_env(tmp_path / "a"), make_env(tmp_path / "b")]
    apps = [create_labelx_app(e.config, catalog=e.catalog, stores=e.stores) for e in envs]
    add_users(apps[0], alice="annotator", admin="admin")
    add_users(apps[1], bob="reviewer", admin="admin")
    try:
        with serving(apps[0]) as a, serving(apps[1]) as b:
            assert a.split(":")[1] == b.split(":")[1] and a != b  # one host, two ports
            yield a, b
    finally:
        for app, e in zip(apps, envs, strict=True):
            app.state.labelx.store.close()
            e.stores.close()
            e.catalog.close()


def who(c: Chrome, base: str) -> str:
    """Who this LabelX's API says is signed in ("" for nobody: the login form)."""
    c.driver.get(f"{base}/api/me")
    name = (
        ""
        if "/login" in c.driver.current_url
        else json.loads(c.driver.find_element("css selector", "body").text)["name"]
    )
    c.driver.get_log("browser")  # a JSON answer opened as a page asks for /favicon.ico (404)
    return name


def sign_in(c: Chrome, base: str, name: str) -> None:
    c.visit(f"{base}/login")
    type_sign_in(c, name, PASSWORD)


def test_signed_in_to_two_labelx_servers_on_one_host_at_once(chrome: Chrome, two_labelx) -> None:  # noqa: F811
    a, b = two_labelx
    sign_in(chrome, a, "alice")
    assert who(chrome, a) == "alice"
    sign_in(chrome, b, "bob")
    assert (who(chrome, a), who(chrome, b)) == ("alice", "bob")  # A's sign-in survived B's

    # each home page shows its own user, and a state-changing request (with the page's CSRF
    # token) goes through on both
    for base, name in ((a, "alice"), (b, "bob")):
        chrome.visit(f"{base}/")
        assert chrome.find(".topbar .who .avatar").text == name
        status = chrome.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "const csrf = JSON.parse(document.getElementById('boot').textContent).csrf;"
            "fetch(arguments[0] + '/api/items/999999/release', {method: 'POST', headers: "
            "{'X-CSRF-Token': csrf}}).then(r => done(r.status), e => done(String(e)));",
            base,
        )
        assert status == 404, (base, status)  # past sign-in and CSRF (401, 403): no such item
        chrome.driver.get_log("browser")  # the 404 asked for, not an error of the page

    # the same name on both is two accounts: signing in as admin on A leaves B's bob signed in
    sign_in(chrome, a, "admin")
    assert (who(chrome, a), who(chrome, b)) == ("admin", "bob")

    # signing out of B does not sign the person out of A
    chrome.visit(f"{b}/")
    chrome.find("#logout").click()
    chrome.wait_for_url(lambda url: url.endswith("/login"))
    assert (who(chrome, a), who(chrome, b)) == ("admin", "")
