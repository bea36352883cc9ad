"""caller37: ``POST /api/tokens`` from a browser session made an ``lx_`` token that never
expires with the session cookie and the CSRF token any LabelX page shows, so a borrowed or
copied session became a permanent credential that outlived sign-out. A session must now send
the account's password again in the same request ("sudo mode"); a bearer token makes one only
for an admin, so a leaked token cannot outlive its own revocation through one it made."""

from __future__ import annotations

from fastapi.testclient import TestClient

from labelx.auth import hash_password
from tests.labelx.conftest import PASSWORD, Session, ok


def _token_count(app, name: str) -> int:
    lx = app.state.labelx
    user = lx.store.user_by_name(name).id
    return lx.store._conn().execute("SELECT COUNT(*) FROM tokens WHERE user_id=?", (user,)).fetchone()[0]


def test_a_session_needs_the_password_again_to_make_a_token(app) -> None:
    alice = Session(app, "alice")
    missing = alice.post("/api/tokens", {"description": "stolen session"})
    assert missing.status_code == 403, missing.text
    assert (
        "password" in missing.json()["error"]["message"] and "'alice'" in missing.json()["error"]["message"]
    )
    wrong = alice.post("/api/tokens", {"description": "guess", "password": "not the password"})
    assert wrong.status_code == 403, wrong.text
    message = wrong.json()["error"]["message"]
    assert "wrong password for 'alice'" in message and "datahub labelx set-password alice" in message
    assert _token_count(app, "alice") == 0
    assert ok(alice.get("/api/me"))["name"] == "alice"  # a refusal does not sign the person out

    token = ok(alice.post("/api/tokens", {"description": "mine", "password": PASSWORD}), 201)["token"]
    script = TestClient(app, base_url="http://127.0.0.1")
    assert ok(script.get("/api/me", headers={"Authorization": f"Bearer {token}"}))["name"] == "alice"


def test_another_accounts_password_does_not_open_sudo_mode(app) -> None:
    """The check is against the session's own account: bob's password (or the admin's) makes
    no token for alice's session."""
    app.state.labelx.store.set_password("bob", hash_password("bob's own pw!"))
    alice = Session(app, "alice")
    assert alice.post("/api/tokens", {"password": "bob's own pw!"}).status_code == 403
    assert _token_count(app, "alice") == 0


def test_only_an_admins_token_makes_another(app) -> None:
    lx = app.state.labelx
    script = TestClient(app, base_url="http://127.0.0.1")
    for name, status in (("alice", 403), ("rita", 403), ("admin", 201)):
        bearer = {"Authorization": f"Bearer {lx.auth.new_token(lx.store.user_by_name(name), 'cli')}"}
        r = script.post("/api/tokens", json={"description": "from a token"}, headers=bearer)
        assert r.status_code == status, (name, r.text)
        assert _token_count(app, name) == (2 if status == 201 else 1)
        if status == 403:
            assert f"datahub labelx create-token {name}" in r.json()["error"]["message"]


def test_a_token_made_over_the_api_expires_unless_asked_not_to(app) -> None:
    """Made from a session it lived for good; now it opens things for 30 days by default
    (``expires_days``; null: until revoked), and the list says when. The operator's
    ``create-token`` still makes one that lasts until revoked."""
    lx = app.state.labelx
    admin = Session(app, "admin")
    default = ok(admin.post("/api/tokens", {"description": "month", "password": PASSWORD}), 201)["token"]
    week = ok(admin.post("/api/tokens", {"password": PASSWORD, "expires_days": 7}), 201)["token"]
    never = ok(admin.post("/api/tokens", {"password": PASSWORD, "expires_days": None}), 201)["token"]
    cli = lx.auth.new_token(lx.store.user_by_name("admin"), "operator")
    listed = {t["description"]: t for t in ok(admin.get("/api/tokens"))}
    assert listed["month"]["expires"] - listed["month"]["created"] == 30 * 86400
    assert listed["operator"]["expires"] is None
    assert admin.post("/api/tokens", {"password": PASSWORD, "expires_days": 0}).status_code == 400

    script = TestClient(app, base_url="http://127.0.0.1")

    def opens(token: str) -> bool:
        return script.get("/api/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200

    assert all(map(opens, (default, week, never, cli)))
    real = lx.store.clock
    lx.store.clock = lambda: real() + 8 * 86400
    assert [opens(t) for t in (default, week, never, cli)] == [True, False, True, True]
    lx.store.clock = lambda: real() + 31 * 86400
    assert [opens(t) for t in (default, week, never, cli)] == [False, False, True, True]
    assert sorted(t["description"] for t in lx.store.list_tokens()) == ["", "operator"]  # the live ones


def test_a_labelx_db_made_before_token_expiry_opens_and_its_tokens_last(env, tmp_path) -> None:
    """An old file's tokens table has no ``expires_at``: it gets one, and its tokens stay live."""
    import sqlite3

    from labelx.auth import sha256
    from labelx.store import LabelStore

    path = tmp_path / "old-labelx.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, role TEXT NOT NULL,"
        " pw_hash TEXT NOT NULL, created_at REAL NOT NULL);"
        "CREATE TABLE tokens(token_hash TEXT PRIMARY KEY, user_id INTEGER NOT NULL,"
        " description TEXT NOT NULL, created_at REAL NOT NULL);"
        "INSERT INTO users VALUES(1, 'old', 'admin', 'x', 0);"
        f"INSERT INTO tokens VALUES('{sha256('lx_old')}', 1, 'from before', 0);"
    )
    db.commit()
    db.close()
    store = LabelStore(path)
    try:
        assert store.token_user(sha256("lx_old")).name == "old"
        assert [(t["description"], t["expires"]) for t in store.list_tokens()] == [("from before", None)]
    finally:
        store.close()
