"""audit15: another user of the machine reads nothing of LabelX's database.

``<home>/labelx.db`` holds a copy of the records of every project's dataset (keys, object
URLs, etags, labels), the accounts' password hashes and the sessions' CSRF tokens. The
catalog beside it is made 0600 because it holds what only a dataset's readers may see;
LabelX's file was made by SQLite with the umask (0644, and its -wal and -shm alike), so any
account of a shared machine read the items of datasets it holds no role on.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.config import load_config
from labelx.app import create_labelx_app
from labelx.deps import labelx_db_path
from tests.api.test_audit14 import as_nobody
from tests.cache.test_file_modes import reachable  # noqa: F401 - a fixture
from tests.labelx.conftest import Env, Session, add_users, make_project

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user (nobody)")


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
