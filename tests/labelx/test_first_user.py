"""A LabelX with no account yet (``datahub serve`` on a new home, not ``make run``) tells the
person at its login form how to make the first one, instead of a form nobody can pass."""

from __future__ import annotations

from fastapi.testclient import TestClient

from labelx.app import create_labelx_app
from tests.labelx.conftest import Env, add_users


def test_the_login_page_names_the_command_that_makes_the_first_user(env: Env) -> None:
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
