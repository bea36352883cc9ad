"""caller44: a LabelX session cookie of another labelx.db is not this LabelX's business.

Two LabelX servers on one host (two ports; cookies are kept by host, not port) both named
their session ``labelx_session``: the browser kept one of them, so signing in to one signed
the person out of the other, and where both were sent (one under ``/labelx``) the pair was
refused and both expired. Each labelx.db's session cookie is now ``labelx_session_<instance>``
and each session id starts with ``<instance>.``: another instance's cookie, or a value under
our name that is not ours (a session from before caller44), is never looked up, never refused
and never expired. The Chromium run is tests/browser/test_caller44_two_labelx.py.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from labelx.app import create_labelx_app
from tests.labelx.conftest import PASSWORD, add_users, session_cookie


def _me(app, cookie: str) -> tuple[int | str, list[str]]:
    """(who /api/me says is signed in, or its status; the cookies the answer sets)."""
    resp = TestClient(app, base_url="http://127.0.0.1").get("/api/me", headers={"Cookie": cookie})
    who = resp.json()["name"] if resp.status_code == 200 else resp.status_code
    return who, resp.headers.get_list("set-cookie")


def test_another_labelx_dbs_session_is_ignored_not_refused_or_expired(app, env, tmp_path) -> None:
    other = create_labelx_app(
        env.config.model_copy(update={"home": str(tmp_path / "other-home")}),
        catalog=env.catalog,
        stores=env.stores,
        cache=env.cache,
    )
    try:
        add_users(other, alice="annotator")  # the same name there: another account
        ours, theirs = app.state.labelx, other.state.labelx
        assert ours.store.instance != theirs.store.instance
        assert session_cookie(app) == f"labelx_session_{ours.store.instance}" != session_cookie(other)
        mine, _ = ours.auth.login("admin", PASSWORD)
        foreign, _ = theirs.auth.login("alice", PASSWORD)
        assert mine.startswith(ours.store.instance + ".") and foreign.startswith(theirs.store.instance + ".")

        # both cookies in one jar, as a browser sends them to either port: each takes its own
        both = f"{session_cookie(app)}={mine}; {session_cookie(other)}={foreign}"
        assert _me(app, both) == ("admin", [])
        assert _me(other, both) == ("alice", [])

        # the other's session id under our name (a page of its port wrote it, or it was copied)
        # beside ours: not ours, so not "two session cookies"; ours holds and nothing is expired
        doubled = f"{session_cookie(app)}={mine}; {session_cookie(app)}={foreign}"
        assert _me(app, doubled) == ("admin", [])
        # alone it opens nothing (401), and the answer expires no cookie
        assert _me(app, f"{session_cookie(app)}={foreign}") == (401, [])
        # a session of this labelx.db under the other's name opens nothing there
        assert _me(other, f"{session_cookie(other)}={mine}") == (401, [])

        # a plain labelx_session (another LabelX from before caller44, or ours from before) is
        # not read and not expired; signing in does not touch it either
        legacy = f"labelx_session=old-unprefixed-id; {session_cookie(app)}={mine}"
        assert _me(app, legacy) == ("admin", [])
        client = TestClient(app, base_url="http://127.0.0.1")
        client.cookies.set("labelx_session", "old-unprefixed-id")
        client.cookies.set(session_cookie(other), foreign)
        client.get("/login")
        form = {
            "name": "alice",
            "password": PASSWORD,
            "csrf": client.cookies[app.state.labelx.auth.login_csrf_cookie],
        }
        signed = client.post("/login", data=form, follow_redirects=False)
        assert signed.status_code == 303
        set_names = {c.split("=", 1)[0] for c in signed.headers.get_list("set-cookie")}
        assert session_cookie(app) in set_names
        assert not set_names & {"labelx_session", session_cookie(other)}, set_names
        assert _me(other, f"{session_cookie(other)}={foreign}") == ("alice", [])  # still signed in there

        # signing out of ours ends ours only
        ours_client = TestClient(app, base_url="http://127.0.0.1")
        sid, csrf = ours.auth.login("bob", PASSWORD)
        ours_client.cookies.set(session_cookie(app), sid)
        out = ours_client.post("/logout", headers={"X-CSRF-Token": csrf})
        assert out.status_code == 200
        assert all(
            c.startswith((session_cookie(app), "__Host-" + session_cookie(app)))
            for c in out.headers.get_list("set-cookie")
        )
        assert _me(other, f"{session_cookie(other)}={foreign}") == ("alice", [])
    finally:
        other.state.labelx.store.close()


def test_two_sessions_of_this_labelx_db_are_still_refused(app) -> None:
    """caller34's rule stands for this instance's own: a page of another port that signed in
    here itself and wrote its session under our name beside the person's is refused, both
    expired (tests/labelx/test_caller34_forms.py)."""
    lx = app.state.labelx
    alice, _ = lx.auth.login("alice", PASSWORD)
    mallory, _ = lx.auth.login("bob", PASSWORD)
    who, expired = _me(app, f"{session_cookie(app)}={alice}; {session_cookie(app)}={mallory}")
    assert who == 401 and expired and all("Max-Age=0" in c for c in expired)
