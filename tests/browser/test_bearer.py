"""A script reading the pages with ``Authorization: Bearer`` gets a 401 naming why when its
token is bad or revoked (as the API answers), not a redirect to a sign-in form it cannot
fill; a browser without a session still goes to the sign-in page."""

from __future__ import annotations

from fastapi.testclient import TestClient

from datahub.api.tokens import revoke_token
from tests.browser.test_access import auth_app, auth_env, token  # noqa: F401 - fixtures


def test_a_bad_or_revoked_bearer_token_is_a_401_page(auth_app, auth_env):  # noqa: F811
    client = TestClient(auth_app, base_url="http://127.0.0.1")
    secret = token(auth_env, "alice")
    assert client.get("/datasets/pets", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    revoke_token(auth_env.catalog.store, secret)
    for header in (f"Bearer {secret}", "Bearer dh_nope", "Basic eDp5"):
        page = client.get("/datasets/pets", headers={"Authorization": header}, follow_redirects=False)
        assert page.status_code == 401 and page.headers["www-authenticate"] == "Bearer", (header, page.text)
        assert "text/html" in page.headers["content-type"] and "token" in page.text
        assert client.get("/v1/datasets/pets", headers={"Authorization": header}).status_code == 401
    browser = client.get("/datasets/pets", follow_redirects=False)
    assert browser.status_code == 303 and browser.headers["location"].startswith("/login?next=")
