"""Users, sessions, CSRF, cookies and tokens (promise 5: nobody reads what they may not)."""

from __future__ import annotations

import sqlite3

from fastapi.testclient import TestClient

from labelx.app import create_labelx_app
from tests.labelx.conftest import (
    PASSWORD,
    Session,
    add_users,
    login_csrf_cookie,
    make_project,
    ok,
    session_cookie,
)


def test_everything_needs_a_login(app):
    anon = TestClient(app, base_url="http://127.0.0.1")
    assert anon.get("/api/projects").status_code == 401
    page = anon.get("/", headers={"accept": "text/html"}, follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert anon.get("/api/items/1/image").status_code == 401
    assert anon.post("/api/projects", json={}).status_code == 401


def test_wrong_password_and_unknown_user_are_refused(app):
    client = TestClient(app, base_url="http://127.0.0.1")
    for name, password in (("alice", "not the password"), ("nobody", PASSWORD)):
        token = client.get("/login").cookies.get(login_csrf_cookie(app))
        resp = client.post(
            "/login", data={"name": name, "password": password, "csrf": token}, follow_redirects=False
        )
        assert resp.headers["location"] == "/login?error=wrong"
        assert session_cookie(app) not in resp.cookies


def test_login_form_needs_its_csrf_token(app):
    client = TestClient(app, base_url="http://127.0.0.1")
    client.get("/login")
    resp = client.post(
        "/login", data={"name": "alice", "password": PASSWORD, "csrf": "forged"}, follow_redirects=False
    )
    assert resp.headers["location"] == "/login?error=expired"


def test_session_cookie_is_httponly_and_samesite_strict(app):
    s = Session(app, "alice")
    cookie = next(c for c in s.client.cookies.jar if c.name == session_cookie(app))
    assert cookie.has_nonstandard_attr("HttpOnly")
    assert cookie.get_nonstandard_attr("SameSite").lower() == "strict"
    assert not cookie.secure  # plain http and not configured


def test_cookies_are_secure_when_configured(env):
    app = create_labelx_app(
        env.config, catalog=env.catalog, stores=env.stores, cache=env.cache, secure_cookies=True
    )
    add_users(app, carol="annotator")
    client = TestClient(app, base_url="https://127.0.0.1")
    token = client.get("/login").cookies.get(f"__Host-{login_csrf_cookie(app)}")  # Secure: __Host- (caller36)
    resp = client.post(
        "/login", data={"name": "carol", "password": PASSWORD, "csrf": token}, follow_redirects=False
    )
    session = next(
        c for c in resp.headers.get_list("set-cookie") if c.startswith(f"__Host-{session_cookie(app)}=")
    )
    assert "secure" in session.lower()
    assert "httponly" in session.lower()
    app.state.labelx.store.close()


def test_state_changing_requests_need_the_csrf_token(app):
    admin = Session(app, "admin")
    body = {"name": "p1", "dataset": "pets", "schema": {"classes": ["cat", "dog"]}}
    missing = admin.client.post("/api/projects", json=body)
    forged = admin.client.post("/api/projects", json=body, headers={"X-CSRF-Token": "x" * 43})
    assert missing.status_code == forged.status_code == 403
    assert ok(admin.get("/api/projects")) == []  # nothing was created
    ok(admin.post("/api/projects", body), 201)


def test_passwords_are_stored_salted_and_hashed(app):
    db = app.state.labelx.store.path
    rows = sqlite3.connect(db).execute("SELECT name, pw_hash FROM users").fetchall()
    hashes = [h for _, h in rows]
    assert all(h.startswith("scrypt$") and PASSWORD not in h for h in hashes)
    assert len(set(hashes)) == len(hashes)  # same password, different salts


def test_logout_ends_the_session(app):
    s = Session(app, "alice")
    assert s.get("/api/me").status_code == 200
    ok(s.post("/logout"))
    assert s.client.get("/api/me", cookies={}).status_code == 401


def test_api_tokens_work_for_scripts_without_csrf(app):
    admin = Session(app, "admin")
    token = ok(admin.post("/api/tokens", {"description": "ci", "password": PASSWORD}), 201)["token"]
    script = TestClient(app, base_url="http://127.0.0.1")
    auth = {"Authorization": f"Bearer {token}"}
    assert ok(script.get("/api/me", headers=auth))["name"] == "admin"
    body = {"name": "scripted", "dataset": "pets", "schema": {"classes": ["cat", "dog"]}}
    ok(script.post("/api/projects", json=body, headers=auth), 201)
    assert script.get("/api/me", headers={"Authorization": "Bearer lx_wrong"}).status_code == 401
    # revoking: not by another user, then by its owner; afterwards it opens nothing
    alice = Session(app, "alice")
    assert alice.post("/api/tokens/revoke", {"token": token}).status_code == 403
    ok(script.post("/api/tokens/revoke", json={"token": token}, headers=auth))
    assert script.get("/api/me", headers=auth).status_code == 401
    assert admin.post("/api/tokens/revoke", {"token": token}).status_code == 404


def test_only_admins_manage_users_and_projects(app):
    alice = Session(app, "alice")
    assert alice.post("/api/users", {"name": "eve", "role": "admin", "password": "x" * 10}).status_code == 403
    assert (
        alice.post(
            "/api/projects", {"name": "x", "dataset": "pets", "schema": {"classes": ["a"]}}
        ).status_code
        == 403
    )
    assert alice.get("/admin", headers={"accept": "text/html"}).status_code == 403
    admin = Session(app, "admin")
    ok(admin.post("/api/users", {"name": "dave", "role": "reviewer", "password": "long enough"}), 201)
    assert (
        admin.post("/api/users", {"name": "dave", "role": "reviewer", "password": "long enough"}).status_code
        == 409
    )
    assert (
        admin.post("/api/users", {"name": "erin", "role": "root", "password": "long enough"}).status_code
        == 400
    )
    assert (
        admin.post("/api/users", {"name": "fred", "role": "annotator", "password": "short"}).status_code
        == 400
    )


def test_annotators_see_only_their_own_projects_and_tasks(app):
    admin = Session(app, "admin")
    project = make_project(admin)
    add_users(app, carol="annotator")
    alice, bob, carol = Session(app, "alice"), Session(app, "bob"), Session(app, "carol")
    pid = project["id"]
    assert [p["name"] for p in ok(alice.get("/api/projects"))] == ["pets-cls"]
    assert ok(carol.get("/api/projects")) == []
    assert carol.get(f"/api/projects/{pid}").status_code == 404
    assert carol.get(f"/api/projects/{pid}/stats").status_code == 404
    alice_tasks = ok(alice.get(f"/api/projects/{pid}/tasks"))
    bob_tasks = ok(bob.get(f"/api/projects/{pid}/tasks"))
    assert [t["assignee"] for t in alice_tasks] == ["alice"] and [t["assignee"] for t in bob_tasks] == ["bob"]
    bobs_task = bob_tasks[0]["id"]
    bobs_item = ok(bob.get(f"/api/tasks/{bobs_task}"))["items"][0]
    assert alice.get(f"/api/tasks/{bobs_task}").status_code == 403
    assert alice.get(f"/tasks/{bobs_task}", headers={"accept": "text/html"}).status_code == 403
    assert alice.get(f"/api/items/{bobs_item['id']}/image").status_code == 403
    assert alice.put(f"/api/items/{bobs_item['id']}", {"version": 0, "value": "cat"}).status_code == 403
    assert carol.get(f"/api/items/{bobs_item['id']}/image").status_code == 404
    # a reviewer sees every project and task, but cannot label another annotator's items
    rita = Session(app, "rita")
    assert len(ok(rita.get(f"/api/projects/{pid}/tasks"))) == 2
    assert rita.put(f"/api/items/{bobs_item['id']}", {"version": 0, "value": "cat"}).status_code == 403
    # annotators cannot review
    assert alice.get(f"/api/projects/{pid}/review").status_code == 403


def test_user_text_cannot_inject_markup_into_pages(app):
    client = TestClient(app, base_url="http://127.0.0.1")
    page = client.get('/login?error="><script>alert(1)</script>').text
    assert "<script>alert(1)" not in page and "&lt;script&gt;" in page
    admin = Session(app, "admin")
    evil = "</script><script>alert(1)</script>"
    body = {"name": "xss", "dataset": "pets", "schema": {"classes": [evil, "dog"]}}
    pid = ok(admin.post("/api/projects", body), 201)["id"]
    html = admin.get(f"/projects/{pid}").text
    assert evil not in html and "\\u003c/script>" in html  # the boot JSON cannot close its <script>
    assert admin.get(f"/projects/{pid}").headers["content-security-policy"].startswith("default-src 'self'")
