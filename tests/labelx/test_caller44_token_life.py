"""caller44: an API token's life is bounded by the token that made it.

- ``POST /api/tokens`` with a bearer token (an admin's: only those may) made a token that never
  expires, or outlived the caller by years, from a 30-day token: a leaked token outlived its own
  expiry through the one it made. Now that is 403 ``access_denied``, saying how long it may ask for.
- Revoking a token left the tokens made with it working, so revoking a leaked token did not
  end the leak. Each token records the token that made it (``tokens.made_by``; an old
  labelx.db gets the column) and revoking one revokes those, all the way down.
- A token made from a browser session (with the password again) is the person's deliberate
  credential: signing out does not revoke it (docs/labelx.md, "API tokens").
"""

from __future__ import annotations

import sqlite3

from fastapi.testclient import TestClient

from labelx.auth import sha256
from labelx.store import LabelStore
from tests.labelx.conftest import PASSWORD, Session, ok


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _mint(app, token: str, **body):
    script = TestClient(app, base_url="http://127.0.0.1")
    return script.post("/api/tokens", json={"description": "made by a token", **body}, headers=_bearer(token))


def _opens(app, token: str) -> bool:
    script = TestClient(app, base_url="http://127.0.0.1")
    return script.get("/api/me", headers=_bearer(token)).status_code == 200


def test_a_token_cannot_make_one_that_outlives_it(app) -> None:
    lx = app.state.labelx
    admin = lx.store.user_by_name("admin")
    week = lx.auth.new_token(admin, "a week", ttl=7 * 86400.0)
    for body, asked in (
        ({"expires_days": None}, "never expires"),
        ({}, "30 days"),
        ({"expires_days": 8}, "8 days"),
    ):
        refused = _mint(app, week, **body)
        assert refused.status_code == 403, (body, refused.text)
        error = refused.json()["error"]
        assert error["code"] == "access_denied"
        assert "cannot outlive it" in error["message"] and asked in error["message"], error["message"]
        assert "expires_days of at most 6" in error["message"], error["message"]
    assert len(lx.store.list_tokens()) == 1  # nothing was made

    made = ok(_mint(app, week, expires_days=6), 201)["token"]
    assert _opens(app, made)
    assert lx.store.token_expiry(sha256(made)) <= lx.store.token_expiry(sha256(week))

    # one that lasts until revoked (the operator's) may make any: revoking it revokes them
    forever = lx.auth.new_token(admin, "operator's")
    ok(_mint(app, forever, expires_days=None), 201)

    # less than a day left: none at all, and the message says so
    real = lx.store.clock
    lx.store.clock = lambda: real() + 7 * 86400 - 3600
    try:
        late = _mint(app, week, expires_days=1)
        assert late.status_code == 403 and "less than a day left" in late.json()["error"]["message"]
    finally:
        lx.store.clock = real


def test_revoking_a_token_revokes_the_tokens_made_with_it(app) -> None:
    lx = app.state.labelx
    admin = Session(app, "admin")
    root = lx.auth.new_token(lx.store.user_by_name("admin"), "leaked")
    child = ok(_mint(app, root, expires_days=30), 201)["token"]
    grandchild = ok(_mint(app, child, expires_days=7), 201)["token"]
    sibling = ok(_mint(app, root, expires_days=30), 201)["token"]
    own = ok(admin.post("/api/tokens", {"description": "from the session", "password": PASSWORD}), 201)[
        "token"
    ]
    assert all(_opens(app, t) for t in (root, child, grandchild, sibling, own))
    # the listing (the admin page's, list-tokens') says which token each was made with
    made_by = {t["id"]: t["made_by"] for t in ok(admin.get("/api/tokens"))}
    assert made_by == {
        sha256(root): None,
        sha256(child): sha256(root),
        sha256(grandchild): sha256(child),
        sha256(sibling): sha256(root),
        sha256(own): None,
    }

    # revoking the child ends it and what it made, not its maker or its sibling
    ok(admin.post("/api/tokens/revoke", {"id": sha256(child)}))
    assert [_opens(app, t) for t in (root, child, grandchild, sibling, own)] == [
        True,
        False,
        False,
        True,
        True,
    ]

    # revoking the root (by its secret, over the API) ends everything it made
    again = ok(_mint(app, root, expires_days=1), 201)["token"]
    ok(admin.post("/api/tokens/revoke", {"token": root}))
    assert [_opens(app, t) for t in (root, sibling, again, own)] == [False, False, False, True]
    assert [t["description"] for t in lx.store.list_tokens()] == ["from the session"]

    # a token made from a session is not ended by signing out of it (it asked for the password)
    ok(admin.post("/logout"))
    assert _opens(app, own)


def test_the_operators_revoke_token_revokes_what_the_token_made(app) -> None:
    """``datahub labelx revoke-token`` goes through the same store call."""
    lx = app.state.labelx
    root = lx.auth.new_token(lx.store.user_by_name("admin"), "cli")
    child = ok(_mint(app, root, expires_days=3), 201)["token"]
    lx.store.delete_token(sha256(root))
    assert not _opens(app, child)


def test_an_old_labelx_db_gets_made_by_and_keeps_its_tokens(tmp_path) -> None:
    path = tmp_path / "old-labelx.db"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, role TEXT NOT NULL,"
        " pw_hash TEXT NOT NULL, created_at REAL NOT NULL);"
        "CREATE TABLE tokens(token_hash TEXT PRIMARY KEY, user_id INTEGER NOT NULL,"
        " description TEXT NOT NULL, created_at REAL NOT NULL, expires_at REAL);"
        "INSERT INTO users VALUES(1, 'old', 'admin', 'x', 0);"
        f"INSERT INTO tokens VALUES('{sha256('lx_old')}', 1, 'from before', 0, NULL);"
        f"INSERT INTO tokens VALUES('{sha256('lx_other')}', 1, 'another', 0, NULL);"
    )
    db.commit()
    db.close()
    for _ in range(2):  # opening it again changes nothing
        store = LabelStore(path)
        try:
            columns = {row[1] for row in store._conn().execute("PRAGMA table_info(tokens)")}
            assert "made_by" in columns
            assert store.token_user(sha256("lx_old")).name == "old"
        finally:
            store.close()
    store = LabelStore(path)
    try:
        store.delete_token(sha256("lx_old"))  # made by nothing known: only itself goes
        assert [t["description"] for t in store.list_tokens()] == ["another"]
    finally:
        store.close()
