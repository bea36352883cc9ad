"""audit15: who keeps a way into LabelX.

- Another user of the machine reads nothing of LabelX's database. ``<home>/labelx.db`` holds a copy of the records of every project's dataset (keys, object
URLs, etags, labels), the accounts' password hashes and the sessions' CSRF tokens. The
catalog beside it is made 0600 because it holds what only a dataset's readers may see;
LabelX's file was made by SQLite with the umask (0644, and its -wal and -shm alike), so any
account of a shared machine read the items of datasets it holds no role on.
- The operator can take an account away. Accounts are the datahub principals of their names
  (under ``--auth`` only the operator makes them), yet nothing could end one: no command
  changed a password or disabled an account, and its sessions and API tokens (which never
  expire) lived on; someone who left kept labelling, reviewing and, as an admin, committing
  into the datasets that principal may write.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from datahub.cli.main import main
from datahub.config import load_config
from labelx.app import create_labelx_app
from labelx.deps import labelx_db_path
from tests.api.test_audit14 import as_nobody
from tests.cache.test_file_modes import reachable  # noqa: F401 - a fixture
from tests.labelx.conftest import PASSWORD, Env, Session, add_users, make_project, ok

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user (nobody)")


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The common default (022): what SQLite would create a new file with, 0644."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _read_as_nobody(path: Path) -> bytes:
    def act() -> bytes:
        try:
            return b"read: " + path.read_bytes()
        except OSError as exc:
            return f"refused: {exc.strerror}".encode()

    return as_nobody(act)


@needs_root
def test_another_user_cannot_read_the_labelx_database(
    env: Env,
    reachable: Path,  # noqa: F811
    usual_umask: None,
) -> None:
    config = load_config(env={}, overrides={"home": str(reachable / "home")})
    app = create_labelx_app(config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    try:
        add_users(app, admin="admin", alice="annotator", bob="annotator")
        make_project(Session(app, "admin"))
        db = labelx_db_path(config)
        files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
        assert all(f.exists() for f in files)
        assert b"img/0000.jpg" in db.read_bytes() + files[1].read_bytes()  # the items it holds
        for f in files:
            answer = _read_as_nobody(f)
            assert answer.startswith(b"refused: "), (f, answer[:200])
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    finally:
        app.state.labelx.store.close()


def _logs_in(app, name: str, password: str) -> bool:
    client = TestClient(app, base_url="http://127.0.0.1")
    client.get("/login")
    form = {
        "name": name,
        "password": password,
        "csrf": client.cookies[app.state.labelx.auth.login_csrf_cookie],
    }
    answer = client.post("/login", data=form, follow_redirects=False)
    return answer.status_code == 303 and not answer.headers["location"].endswith("?error=wrong")


def test_the_operator_can_take_an_account_away_and_give_it_back(
    app, env: Env, tmp_path: Path, monkeypatch
) -> None:
    admin = Session(app, "admin")
    make_project(admin)
    token = ok(admin.post("/api/tokens", {"password": PASSWORD}), 201)["token"]
    script = TestClient(app, base_url="http://127.0.0.1")
    bearer = {"Authorization": f"Bearer {token}"}
    assert (
        script.get("/api/me", headers=bearer).status_code == 200 and admin.get("/api/me").status_code == 200
    )
    cli = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]

    assert main([*cli, "labelx", "disable-user", "admin"]) == 0  # where the server runs
    assert admin.get("/api/me").status_code == 401  # the browser session ended
    assert script.get("/api/me", headers=bearer).status_code == 401  # and the script's token
    assert admin.post("/api/projects/1/commit", {}).status_code == 401
    assert not _logs_in(app, "admin", PASSWORD)
    assert _logs_in(app, "alice", PASSWORD)  # nobody else's

    monkeypatch.setenv("LABELX_PASSWORD", "a new long password")
    assert main([*cli, "labelx", "set-password", "admin"]) == 0
    assert not _logs_in(app, "admin", PASSWORD)
    assert _logs_in(app, "admin", "a new long password")
    assert main([*cli, "labelx", "disable-user", "nobody-by-that-name"]) != 0
