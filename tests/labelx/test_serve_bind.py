"""``datahub labelx serve`` off loopback: local mode refused at start, ``--auth`` serves.

In local mode (no datahub accounts: the person at this machine) LabelX skips the datasets'
access lists: a LabelX admin acts as the datahub's local admin. Before, ``labelx serve
--host 0.0.0.0`` served so anyway, and anyone on the network who logged in as a LabelX admin
snapshotted any dataset into a project (every key, every picture's bytes), committed labels
onto it and made more admin accounts. Now local mode is refused off loopback, as
``datahub serve`` refuses it, with a message naming ``--auth``; with ``--auth`` a LabelX
account holds only the roles its name has on the datasets.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx

from datahub.catalog import Put, Record, open_catalog
from datahub.config import Config
from labelx.auth import hash_password
from labelx.deps import labelx_db_path
from labelx.store import LabelStore
from tests.cli.test_demo import start, stop
from tests.labelx.conftest import PASSWORD, SCHEMA
from tests.labelx.test_serve_signals import wait_answering
from tests.servers import free_port

NOT_LOOPBACK = "0.0.0.0"  # every address of this machine, its network ones too


def _home(config: Config) -> Path:
    """A home with dataset ``pets`` that only ``owner`` may read, and LabelX admin ``admin``."""
    config.home_path.mkdir(parents=True, exist_ok=True)
    catalog = open_catalog(config.resolved_catalog_url)
    try:
        catalog.create_dataset("pets", owner="owner")
        catalog.commit("pets", [Put(Record("a.jpg", "file:///nowhere/a.jpg", "e1", 1))], message="v1")
    finally:
        catalog.close()
    store = LabelStore(labelx_db_path(config))
    try:
        store.create_user("admin", "admin", hash_password(PASSWORD))
    finally:
        store.close()
    return config.home_path


def _serve(home: Path, port: int, cwd: Path, *extra: str) -> subprocess.Popen:
    args = ["labelx", "serve", "--host", NOT_LOOPBACK, "--port", str(port), *extra]
    return start(["-m", "datahub.cli.main", "--home", str(home), *args], cwd)


def test_local_mode_off_loopback_is_refused_at_start_naming_auth(config: Config, tmp_path: Path) -> None:
    home, port = _home(config), free_port()
    proc = _serve(home, port, tmp_path)
    try:
        _, err = proc.communicate(timeout=120)  # a hang guard: before, it served here for ever
    except subprocess.TimeoutExpired:
        stop(proc, 15)
        raise AssertionError("labelx serve answered on 0.0.0.0 in local mode") from None
    assert proc.returncode == 2, err
    assert f"refusing local mode (no authentication) on {NOT_LOOPBACK}" in err, err
    assert "--auth" in err and "datahub labelx create-user" in err and "Traceback" not in err, err


def test_with_auth_off_loopback_an_admin_holds_only_its_datasets_roles(
    config: Config, tmp_path: Path
) -> None:
    home, port = _home(config), free_port()
    proc = _serve(home, port, tmp_path, "--auth")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_answering(proc, url)
        with httpx.Client(base_url=url) as client:
            token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]
            client.post("/login", data={"name": "admin", "password": PASSWORD, "csrf": token})
            csrf = re.search(r'"csrf": "([^"]+)"', client.get("/").text)[1]
            body = {"name": "p1", "dataset": "pets", "schema": SCHEMA, "task_size": 5}
            made = client.post("/api/projects", json=body, headers={"X-CSRF-Token": csrf})
            assert made.status_code == 404, made.text  # as if missing: admin has no role on pets
            assert made.json()["error"]["code"] == "dataset_not_found"
            more = client.post(
                "/api/users",
                json={"name": "owner", "role": "admin", "password": PASSWORD},
                headers={"X-CSRF-Token": csrf},
            )
            assert more.status_code == 403, more.text  # nor an account named after the owner
    finally:
        stop(proc, 15)
