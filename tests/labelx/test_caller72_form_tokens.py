"""caller72: the sign-in form's token is this LabelX's own, as its session ids are.

The form's double-submit cookie is named per labelx.db (``labelx_login_csrf_<instance>``, so
two LabelX servers on one host keep their forms apart: tests/browser/test_caller72_two_labelx_forms.py)
and its token starts with the instance id. A pair of cookie and field this LabelX did not make
(a value without its instance id, under its name) is the expired form's answer, as a
session id without it opens nothing; so is a field that is no token at all (non-ASCII text,
which the comparison refused with a server error before).
"""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from tests.labelx.conftest import PASSWORD, login_csrf_cookie


def _post(app, cookie: str, sent: str):
    client = TestClient(app, base_url="http://127.0.0.1")
    client.cookies.set(login_csrf_cookie(app), cookie)
    form = {"name": "alice", "password": PASSWORD, "csrf": sent}
    return client.post("/login", data=form, follow_redirects=False)


def test_only_a_form_token_of_this_instance_signs_in(app) -> None:
    instance = app.state.labelx.auth.instance
    made = TestClient(app, base_url="http://127.0.0.1").get("/login")
    token = re.search(r'name="csrf" value="([^"]+)"', made.text)[1]
    assert token.startswith(f"{instance}.") and made.cookies.get(login_csrf_cookie(app)) == token
    for cookie, sent in (
        ("planted", "planted"),
        ("0123456789abcdef.planted", "0123456789abcdef.planted"),
        (f"{instance}x.planted", f"{instance}x.planted"),
        (token, "é" * 8),
    ):
        refused = _post(app, cookie, sent)
        assert refused.status_code == 303, (cookie, sent, refused.status_code)
        assert refused.headers["location"] == "/login?error=expired", (cookie, sent)
    signed = _post(app, token, token)
    assert signed.status_code == 303 and signed.headers["location"] == "/", signed.headers
