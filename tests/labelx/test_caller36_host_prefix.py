"""caller36: where a sign-in cookie is Secure, only its ``__Host-`` name is read.

A plain ``labelx_session`` is one a page on another port or an ``http://`` address of the host
wrote (a browser keeps a ``__Host-`` cookie only from an https page of this host): it opened
LabelX for a signed-out person, in the writer's account. The requests below carry the exact
``Cookie`` header a browser sends; Chromium over https drives it in
``tests/browser/test_caller36_host_cookies.py``.
"""

from __future__ import annotations

import warnings

from labelx.app import create_labelx_app
from tests.labelx.conftest import PASSWORD, add_users, session_cookie

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette prefers httpx2 for its TestClient
    from fastapi.testclient import TestClient


def _me(app, base: str, cookie: str) -> int | str:
    resp = TestClient(app, base_url=base).get("/api/me", headers={"Cookie": cookie})
    return resp.json()["name"] if resp.status_code == 200 else resp.status_code


def test_a_plain_session_cookie_is_not_read_where_cookies_are_secure(env) -> None:
    """``--secure-cookies`` (a TLS proxy ahead) over the proxy's plain hop, and https itself."""
    app = create_labelx_app(
        env.config, catalog=env.catalog, stores=env.stores, cache=env.cache, secure_cookies=True
    )
    try:
        add_users(app, alice="annotator")
        sid, _ = app.state.labelx.auth.login("alice", PASSWORD)
        for base in ("http://127.0.0.1", "https://127.0.0.1"):
            assert _me(app, base, f"{session_cookie(app)}={sid}") == 401, base
            assert _me(app, base, f"__Host-{session_cookie(app)}={sid}") == "alice", base
    finally:
        app.state.labelx.store.close()


def test_over_https_a_plain_session_cookie_is_not_read(app) -> None:
    """``app``: alice exists already (tests/labelx/conftest.py)."""
    sid, _ = app.state.labelx.auth.login("alice", PASSWORD)
    assert _me(app, "https://127.0.0.1", f"{session_cookie(app)}={sid}") == 401
    assert _me(app, "https://127.0.0.1", f"__Host-{session_cookie(app)}={sid}") == "alice"
    # plain http, where no cookie can be Secure, signs people in as before
    assert _me(app, "http://127.0.0.1", f"{session_cookie(app)}={sid}") == "alice"
