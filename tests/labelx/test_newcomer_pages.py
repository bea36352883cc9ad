"""LabelX pages as a newcomer meets them: what the login page says while no account exists
(``datahub serve`` on a new home, not ``make run``), and pages a role may not open saying so."""

from __future__ import annotations

from fastapi.testclient import TestClient

from labelx.app import create_labelx_app
from tests.labelx.conftest import Env, Session, add_users, make_project


def test_the_login_page_names_the_command_that_makes_the_first_user(env: Env) -> None:
    """Instead of a form nobody can pass."""
    app = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    try:
        client = TestClient(app, base_url="http://127.0.0.1")
        page = client.get("/login").text
        assert 'id="no-users"' in page
        assert "datahub labelx create-user NAME --role admin" in page
        add_users(app, admin="admin")
        assert 'id="no-users"' not in client.get("/login").text
    finally:
        app.state.labelx.store.close()


def test_an_annotator_opening_the_review_page_is_told_it_is_for_reviewers(app) -> None:
    """The page, not only its API: it answered 200 with an empty review queue shell, whose
    script then failed on the queue's 403."""
    pid = make_project(Session(app, "admin"))["id"]
    page = Session(app, "alice").get(f"/projects/{pid}/review", headers={"accept": "text/html"})
    assert page.status_code == 403
    assert "only reviewers and admins review" in page.text and "<h1>403 access_denied</h1>" in page.text
    assert (
        Session(app, "rita").get(f"/projects/{pid}/review", headers={"accept": "text/html"}).status_code
        == 200
    )
