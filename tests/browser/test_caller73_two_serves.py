"""caller73: two ``datahub serve`` on one host (two homes, two catalogs, two ports), one browser.

A browser keeps cookies by host, not port (RFC 6265), so every cookie one server sets on
127.0.0.1 is sent to the other. Before, both named their session cookie ``datahub_session`` and
their sign-in form's ``datahub_login_csrf``: signing in to B replaced A's session cookie, so A
asked the person to sign in again; signing out of B deleted the one cookie both read; and B's
sign-in form reused the token A's had set. Each catalog now has an instance id
(``CatalogStore.instance_id``) in its cookies' names and its form tokens, as each labelx.db
has for LabelX (caller44, caller72).

Two apps ``datahub serve`` builds, each over its own home and SQLite catalog, served by uvicorn
on two loopback ports and driven with one httpx cookie jar, as a browser keeps it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from datahub.api.tokens import issue_token
from datahub.cli.serve_cmd import build_app
from tests.browser.conftest import fill_pets, make_env, serving


@pytest.fixture(scope="module")
def two_serves(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[str, str]]]:
    """[(A's URL, alice's token of A's catalog), (B's URL, bob's token of B's catalog)]."""
    tmp = tmp_path_factory.mktemp("caller73-serves")
    envs = [make_env(tmp / "a", local_mode=False), make_env(tmp / "b", local_mode=False)]
    tokens = []
    for env, who in zip(envs, ("alice", "bob"), strict=True):
        fill_pets(env)
        tokens.append(issue_token(env.catalog.store, who)[0])
    built = [build_app(env.config, env.catalog, env.stores, labelx=False) for env in envs]
    try:
        with serving(built[0][0]) as a, serving(built[1][0]) as b:
            yield [(a, tokens[0]), (b, tokens[1])]
    finally:
        for (_, cache), env in zip(built, envs, strict=True):
            cache.close()
            env.stores.close()
            env.catalog.close()


def _form_token(client: httpx.Client, url: str, page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', client.get(f"{url}{page}").text)[1]


def _sign_in(client: httpx.Client, url: str, token: str, csrf: str | None = None) -> httpx.Response:
    csrf = _form_token(client, url, "/login") if csrf is None else csrf
    return client.post(f"{url}/login", data={"token": token, "csrf": csrf, "next": "/"})


def _who(client: httpx.Client, url: str) -> str | None:
    """Who the server at ``url`` sees signed in (None: it sends the person to sign in)."""
    r = client.get(f"{url}/")
    if r.status_code == 303:
        assert r.headers["location"].startswith("/login"), r.headers
        return None
    assert r.status_code == 200, (r.status_code, r.text[:300])
    return re.search(r'class="who"[^>]*>\s*([^<\s]+)', r.text)[1]


def test_signing_in_to_one_leaves_the_other_signed_in(two_serves) -> None:
    (a, alice), (b, bob) = two_serves
    with httpx.Client(timeout=60) as browser:
        assert _sign_in(browser, a, alice).status_code == 303
        assert _who(browser, a) == "alice"
        assert _sign_in(browser, b, bob).status_code == 303
        assert _who(browser, b) == "bob"
        assert _who(browser, a) == "alice"  # was None: B's cookie replaced A's
        # signing out of B ends B's sign-in only
        assert browser.post(f"{b}/logout", data={"csrf": _form_token(browser, b, "/")}).status_code == 303
        assert _who(browser, b) is None
        assert _who(browser, a) == "alice"


def test_each_sign_in_form_keeps_its_own_token(two_serves) -> None:
    """A's form, opened before B's and sent after, still signs in; a token of B's form is not
    A's (each starts with its catalog's instance id) even under A's cookie name."""
    (a, alice), (b, bob) = two_serves
    with httpx.Client(timeout=60) as browser:
        a_form = _form_token(browser, a, "/login")
        b_form = _form_token(browser, b, "/login")
        assert a_form != b_form  # was one token for both: B's form reused the cookie A's set
        assert _sign_in(browser, a, alice, a_form).status_code == 303
        assert _sign_in(browser, b, bob, b_form).status_code == 303
        assert (_who(browser, a), _who(browser, b)) == ("alice", "bob")
    with httpx.Client(timeout=60) as other:
        other.get(f"{a}/login")
        a_name = next(c.name for c in other.cookies.jar if "login_csrf" in c.name)
        other.cookies.set(a_name, b_form)
        r = _sign_in(other, a, alice, b_form)
        assert r.status_code == 403 and "expired" in r.text, (r.status_code, r.text[:300])
