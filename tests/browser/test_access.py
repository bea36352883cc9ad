"""Access in the browser is the API's: tokens, ACLs, 404 for what the caller may not read.

alice owns ``pets``; bob owns ``secret``, derived from pets (so it is downstream of pets in
its lineage); carol may read nothing. Each sees exactly what ``GET /v1/datasets`` shows them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from datahub.api.tokens import issue_token, revoke_token
from tests.browser.chrome import chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env, browser_app, pets_env, serving, token_sign_in

PAGES = (
    "/datasets/{d}",
    "/datasets/{d}/versions/1",
    "/datasets/{d}/versions/1?prefix=train/",
    "/datasets/{d}/versions/1/records/train/cat/000.jpg",
    "/datasets/{d}/diff?from=1&to=2",
    "/thumbs/{d}/1/train/cat/000.jpg",
    "/datasets/{d}/versions/1/charts/sizes.svg",
)


@pytest.fixture
def auth_env(tmp_path: Path) -> Iterator[Env]:
    with pets_env(tmp_path, local_mode=False, in_ram=True) as e:
        e.catalog.derive("pets", 2, "labels.class=dog", to_dataset="secret", owner="bob")
        e.catalog.update_dataset("secret", description="bob's secret")
        yield e


@pytest.fixture
def auth_app(auth_env: Env):
    with browser_app(auth_env) as served:
        yield served


def token(env: Env, who: str) -> str:
    return issue_token(env.catalog.store, who)[0]


def signed_in(app, secret: str) -> TestClient:
    client = TestClient(app, base_url="http://127.0.0.1")
    page = client.get("/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)[1]
    resp = client.post("/login", data={"token": secret, "csrf": csrf, "next": "/"}, follow_redirects=False)
    assert resp.status_code == 303 and resp.headers["location"] == "/", resp.text
    cookie = resp.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    return client


def test_nobody_signed_in_is_sent_to_the_login_page(auth_app):
    client = TestClient(auth_app, base_url="http://127.0.0.1")
    for path in ("/", *(p.format(d="pets") for p in PAGES)):
        resp = client.get(path, follow_redirects=False)
        assert resp.status_code == 303 and resp.headers["location"].startswith("/login?next="), path
    assert client.get("/v1/datasets").status_code == 401  # the API never reads the cookie either way


def test_each_caller_sees_exactly_what_the_api_shows(auth_app, auth_env):
    alice, carol = token(auth_env, "alice"), token(auth_env, "carol")
    a, c = signed_in(auth_app, alice), signed_in(auth_app, carol)
    home = a.get("/").text
    assert 'href="/datasets/pets"' in home and "secret" not in home
    assert a.get("/v1/datasets", headers={"Authorization": f"Bearer {alice}"}).json()  # same token, same view
    assert "pets" not in c.get("/").text and "secret" not in c.get("/?q=se").text
    # alice's lineage of pets never shows bob's dataset derived from it
    pets = a.get("/datasets/pets").text
    assert "secret" not in pets
    for template in PAGES:
        assert a.get(template.format(d="pets")).status_code == 200, template
        missing = c.get(template.format(d="nope"))
        hidden = c.get(template.format(d="pets"))
        assert hidden.status_code == missing.status_code == 404, template
        # the very page a missing dataset gives, but for the name: nothing tells them apart
        assert hidden.text.replace("pets", "X") == missing.text.replace("nope", "X"), template
        assert "pet pictures" not in hidden.text
    # bob may read secret, not pets: pets is the upstream of secret, and stays invisible
    b = signed_in(auth_app, token(auth_env, "bob"))
    page = b.get("/datasets/secret").text
    # nor does the derive's own commit message name it (as GET /v1/.../versions says it)
    assert 'data-node="secret@v1"' in page and 'data-node="pets@' not in page
    assert "(hidden dataset)" in page and "pets@" not in page
    assert 'href="/datasets/pets' not in page
    assert b.get("/datasets/pets").status_code == 404


def test_a_revoked_token_ends_the_session_and_a_bad_one_never_starts(auth_app, auth_env):
    secret = token(auth_env, "alice")
    a = signed_in(auth_app, secret)
    assert a.get("/datasets/pets").status_code == 200
    revoke_token(auth_env.catalog.store, secret)
    resp = a.get("/datasets/pets", follow_redirects=False)
    assert resp.status_code == 303 and "/login" in resp.headers["location"]
    client = TestClient(auth_app, base_url="http://127.0.0.1")
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]
    bad = client.post("/login", data={"token": "dh_nope", "csrf": csrf}, follow_redirects=False)
    assert bad.status_code == 303 and "error=" in bad.headers["location"] and "set-cookie" not in bad.headers
    # a form from another site (no double-submit cookie, foreign Origin) is refused
    stranger = TestClient(auth_app, base_url="http://127.0.0.1")
    forged = stranger.post(
        "/login",
        data={"token": token(auth_env, "alice"), "csrf": "x"},
        headers={"Origin": "http://evil.test"},
    )
    assert forged.status_code == 403 and "set-cookie" not in forged.headers
    # after sign-in, only a path of this site is followed
    off_site = client.post("/login", data={"token": secret, "csrf": csrf, "next": "//evil.test/"})
    assert off_site.url.host == "127.0.0.1"


def test_sign_in_with_a_token_in_chromium(chrome, auth_app, auth_env):  # noqa: F811
    with serving(auth_app) as base:
        chrome.visit(f"{base}/datasets/pets", "10-sign-in")  # redirected to the form
        assert "/login?next=" in chrome.driver.current_url
        token_sign_in(chrome, token(auth_env, "alice"))
        assert chrome.driver.current_url == f"{base}/datasets/pets"
        chrome.check("11-signed-in")
        assert "datahub_session" not in chrome.driver.execute_script("return document.cookie")  # HttpOnly
        assert "secret" not in chrome.find("main").text
        chrome.visit(f"{base}/datasets/secret", "12-hidden", error_page=True)
        assert "dataset 'secret' not found" in chrome.find(".error-message").text
        chrome.find("form.inline button").click()  # sign out
        chrome.wait_for_url(lambda url: "/login" in url)
        chrome.visit(f"{base}/", "13-signed-out")
        assert "/login?next=" in chrome.driver.current_url
