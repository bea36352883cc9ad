"""caller72: two LabelX servers on one host keep their sign-in forms apart.

A browser keeps cookies by host, not port (RFC 6265): two LabelX servers on two ports of one
host share its cookie jar. Their sessions have had names of their own since caller44
(``labelx_session_<instance>``), but the sign-in form's double-submit cookie and the cookie that
keeps the user name a refused sign-in typed were ``labelx_login_csrf`` and ``labelx_login_name``
for every LabelX: opening B's form replaced A's token, so A's form sent next was refused as
"expired"; and B's form, after a refused sign-in at B, came filled with the user name typed into
A. Now both carry the instance id in their name, and the form's token starts with it (checked
by the server, as a session id is: tests/labelx/test_caller72_form_tokens.py), so neither
server reads or replaces the other's.
Both servers over plain http on 127.0.0.1, driven with one httpx cookie jar as a browser keeps it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from labelx.app import create_labelx_app
from tests.browser.conftest import make_env, serving
from tests.labelx.conftest import PASSWORD, add_users


@pytest.fixture(scope="module")
def two_labelx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(A's URL, B's URL): standalone LabelX servers, each with its own home and labelx.db."""
    tmp = tmp_path_factory.mktemp("caller72-forms")
    envs = [make_env(tmp / "a"), make_env(tmp / "b")]
    apps = [create_labelx_app(e.config, catalog=e.catalog, stores=e.stores) for e in envs]
    add_users(apps[0], alice="annotator")
    add_users(apps[1], bob="annotator")
    try:
        with serving(apps[0]) as a, serving(apps[1]) as b:
            yield a, b
    finally:
        for app, env in zip(apps, envs, strict=True):
            app.state.labelx.store.close()
            env.stores.close()
            env.catalog.close()


def _form_token(client: httpx.Client, url: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', client.get(f"{url}/login").text)[1]


def test_a_form_opened_on_another_labelx_leaves_this_ones_form_working(two_labelx) -> None:
    a, b = two_labelx
    with httpx.Client(timeout=60) as browser:
        a_token = _form_token(browser, a)  # the person opens A's sign-in form
        _form_token(browser, b)  # then B's, in another tab
        sent = browser.post(f"{a}/login", data={"name": "alice", "password": PASSWORD, "csrf": a_token})
        assert sent.status_code == 303 and sent.headers["location"] == "/", sent.headers.get("location")
        assert browser.get(f"{a}/api/me").json()["name"] == "alice"


def test_another_labelx_does_not_show_the_name_typed_into_this_one(two_labelx) -> None:
    a, b = two_labelx
    with httpx.Client(timeout=60) as browser:
        wrong = {"name": "alice.private@example.com", "password": "not it", "csrf": _form_token(browser, a)}
        refused = browser.post(f"{a}/login", data=wrong)
        assert refused.status_code == 303 and "error=wrong" in refused.headers["location"]
        assert "alice.private@example.com" in browser.get(f"{a}/login?error=wrong").text  # A keeps it
        assert "alice.private@example.com" not in browser.get(f"{b}/login?error=wrong").text
