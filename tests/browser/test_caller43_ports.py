"""caller43: the dataset browser and LabelX on one host, two ports, one cookie jar.

Cookies do not isolate ports (RFC 6265): every cookie either app sets on 127.0.0.1 is sent to
both. So each app must take only its own sign-in: distinct cookie names (``datahub_*`` for the
browser, ``labelx_*`` for LabelX), sessions looked up in each app's own store (the catalog's
browser sessions; labelx.db), CSRF tokens of each app's own. And neither app may write a cookie
of the other's name, which would overwrite or fix the other's sign-in (cookie tossing).

Here ``datahub serve`` (the browser, LabelX under ``/labelx``) runs on one port and a second,
standalone LabelX (another home, its own labelx.db) on another, both over plain HTTP, driven
with one httpx cookie jar as a browser keeps it. Checked, and found to hold on the base: no
code change came with this file (see the report of caller43 for the one limit left then: two
LabelX instances on one host shared the cookie name ``labelx_session``, so a person signed in to
both was asked to sign in again by the one under ``/labelx``, which refused two session cookies;
since caller44 each labelx.db has its own, ``labelx_session_<instance>``:
tests/browser/test_caller44_two_labelx.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from datahub.api.tokens import issue_token
from datahub.browser import session as browser_session
from datahub.cli.serve_cmd import build_app
from labelx import auth as labelx_auth
from labelx.app import create_labelx_app
from tests.browser.conftest import fill_pets, make_env, serving
from tests.labelx.conftest import PASSWORD, add_users


@pytest.fixture(scope="module")
def two_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str, str, object]]:
    """(the browser's URL, the standalone LabelX's URL, alice's API token, the standalone
    LabelX's session cookie name, the browser's services: its cookies' names)."""
    tmp = tmp_path_factory.mktemp("caller43-ports")
    env = make_env(tmp / "a", local_mode=False)
    other = make_env(tmp / "b", local_mode=False)
    fill_pets(env)
    token = issue_token(env.catalog.store, "alice")[0]
    app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
    embedded = next(r.app for r in app.routes if getattr(r, "path", "") == "/labelx")
    lone = create_labelx_app(other.config, catalog=other.catalog, stores=other.stores)
    add_users(embedded, carol="annotator")
    add_users(lone, bob="annotator")
    try:
        with serving(app) as browser_url, serving(lone) as labelx_url:
            yield browser_url, labelx_url, token, lone.state.labelx.auth.session_cookie, app.state.services
    finally:
        lone.state.labelx.store.close()
        cache.close()
        for e in (env, other):
            e.stores.close()
            e.catalog.close()


class Jar:
    """One client for both ports, keeping what each answer set (``Set-Cookie``) by port."""

    def __init__(self) -> None:
        self.set_by: dict[int, list[str]] = {}
        self.client = httpx.Client(timeout=60, event_hooks={"response": [self._seen]})

    def _seen(self, response: httpx.Response) -> None:
        self.set_by.setdefault(response.url.port, []).extend(response.headers.get_list("set-cookie"))

    def browser_sign_in(self, url: str, token: str) -> None:
        form = self.client.get(f"{url}/login").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)[1]
        r = self.client.post(f"{url}/login", data={"token": token, "csrf": csrf, "next": "/"})
        assert r.status_code == 303 and r.headers["location"] == "/", (r.status_code, r.text[:300])

    def labelx_sign_in(self, url: str, name: str) -> str:
        """Sign in through LabelX's form at ``url``; the page's CSRF token."""
        form = self.client.get(f"{url}/login").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)[1]
        r = self.client.post(f"{url}/login", data={"name": name, "password": PASSWORD, "csrf": csrf})
        assert r.status_code == 303, (r.status_code, r.text[:300])
        return re.search(r'"csrf": "([^"]+)"', self.client.get(f"{url}/").text)[1]

    def cookie(self, name: str) -> str:
        return next(c.value for c in self.client.cookies.jar if c.name == name)


def _signed_in_browser(jar: Jar, url: str) -> bool:
    r = jar.client.get(f"{url}/")
    if r.status_code == 303:
        assert r.headers["location"].startswith("/login"), r.headers
        return False
    assert r.status_code == 200, r.status_code
    return True


def _labelx_me(jar: Jar, url: str, cookies: str | None = None) -> int | str:
    headers = {"Cookie": cookies} if cookies is not None else {}
    client = jar.client if cookies is None else httpx.Client(timeout=60)
    r = client.get(f"{url}/api/me", headers=headers)
    return r.json()["name"] if r.status_code == 200 else r.status_code


def test_each_app_takes_only_its_own_sign_in(two_ports) -> None:
    browser, labelx, token, lx_session, services = two_ports
    dh_session = browser_session.session_cookie(services)  # datahub_session_<instance> (caller73)
    jar = Jar()
    jar.browser_sign_in(browser, token)
    csrf = jar.labelx_sign_in(labelx, "bob")
    # both cookies are in the one jar, so both go to both ports; each app reads its own
    names = {c.name for c in jar.client.cookies.jar}
    assert {dh_session, lx_session} <= names, names
    assert _signed_in_browser(jar, browser)
    assert _labelx_me(jar, labelx) == "bob"
    # the LabelX under the browser's port (its own labelx.db) does not take the other's session
    assert _labelx_me(jar, f"{browser}/labelx") == 401
    # a session id of one app under the other's cookie name opens nothing
    browser_id, labelx_id = jar.cookie(dh_session), jar.cookie(lx_session)
    assert _labelx_me(jar, labelx, f"{lx_session}={browser_id}") == 401
    swapped = httpx.get(f"{browser}/", headers={"Cookie": f"{dh_session}={labelx_id}"})
    assert swapped.status_code == 303 and swapped.headers["location"].startswith("/login")
    # signing in again on one port leaves the other's sign-in as it was
    jar.browser_sign_in(browser, token)
    assert _labelx_me(jar, labelx) == "bob" and jar.cookie(lx_session) == labelx_id
    jar.labelx_sign_in(labelx, "bob")
    assert _signed_in_browser(jar, browser)
    # signing out of LabelX ends LabelX's sign-in only
    out = jar.client.post(f"{labelx}/logout", headers={"X-CSRF-Token": jar.labelx_sign_in(labelx, "bob")})
    assert out.status_code == 200, out.text
    assert _labelx_me(jar, labelx) == 401
    assert _signed_in_browser(jar, browser)
    # and signing out of the browser ends the browser's only
    jar.labelx_sign_in(labelx, "bob")
    form = jar.client.get(f"{browser}/").text
    logout_csrf = re.search(r'name="csrf" value="([^"]+)"', form)[1]
    assert jar.client.post(f"{browser}/logout", data={"csrf": logout_csrf}).status_code == 303
    assert not _signed_in_browser(jar, browser)
    assert _labelx_me(jar, labelx) == "bob"
    assert csrf  # LabelX's page token came with its own session (checked by its routes)
    # neither app ever set a cookie of the other's names (which would overwrite or fix its sign-in)
    port = {url: httpx.URL(url).port for url in (browser, labelx)}
    for set_cookie in jar.set_by[port[browser]]:
        name = set_cookie.split("=", 1)[0].removeprefix("__Host-")  # the expiry of a __Host- one too
        assert name.startswith("datahub_") or (
            name.startswith("labelx_") and "path=/labelx" in set_cookie.lower()
        ), set_cookie
    for set_cookie in jar.set_by[port[labelx]]:
        assert set_cookie.split("=", 1)[0].removeprefix("__Host-").startswith("labelx_"), set_cookie


def test_a_csrf_token_of_one_app_is_not_the_others(two_ports) -> None:
    """LabelX's page token belongs to its session: the browser's login-form token, sent by
    the same jar, does not pass LabelX's check, nor LabelX's login-form token the browser's."""
    browser, labelx, token, lx_session, services = two_ports
    jar = Jar()
    jar.browser_sign_in(browser, token)
    jar.labelx_sign_in(labelx, "bob")
    browser_form_token = jar.cookie(browser_session.login_csrf_cookie(services))
    r = jar.client.post(f"{labelx}/logout", headers={"X-CSRF-Token": browser_form_token})
    assert r.status_code == 403, r.text
    assert _labelx_me(jar, labelx) == "bob"  # not signed out by it
    jar.client.get(f"{labelx}/login")  # LabelX's login-form cookie is set for the host
    lx_form_token = jar.cookie(
        labelx_auth.LOGIN_CSRF_COOKIE + lx_session.removeprefix(labelx_auth.SESSION_COOKIE)
    )
    r = jar.client.post(f"{browser}/logout", data={"csrf": lx_form_token})
    assert r.status_code == 403, r.text
    assert _signed_in_browser(jar, browser)
