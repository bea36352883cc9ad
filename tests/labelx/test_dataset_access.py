"""LabelX under an authenticated datahub (``api.local_mode = false``): the datasets' access
lists hold for LabelX too.

A LabelX account is the datahub principal of the same name (never a global admin).
A LabelX admin who may not read a dataset through the API must not snapshot it into a
project (whose items show every key and picture to its annotators), nor copy it into a new
dataset; committing labels onto a dataset needs the writer role, as a commit through the API
does. In local mode every caller is the API's local admin, so nothing changes there.
"""

from __future__ import annotations

import re

import pytest

from datahub.catalog import Catalog
from labelx.app import create_labelx_app
from tests.labelx.conftest import PASSWORD, SCHEMA, Env, Session, add_users, ok


@pytest.fixture
def authed(env: Env):
    env.config.api.local_mode = False
    app = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    add_users(app, admin="admin", alice="annotator")
    yield app
    app.state.labelx.store.close()


def _project(admin: Session, name: str = "p1"):
    body = {"name": name, "dataset": "pets", "schema": SCHEMA, "task_size": 12, "annotators": ["alice"]}
    return admin.post("/api/projects", body)


def _grant(catalog: Catalog, **roles: str) -> None:
    catalog.update_dataset("pets", acl=roles)


def _label_one_and_accept(admin: Session, pid: int) -> None:
    task = ok(admin.get(f"/api/projects/{pid}/tasks"))[0]
    items = ok(admin.get(f"/api/tasks/{task['id']}"))["items"]
    for i, it in enumerate(items):
        body = {"value": "dog"} if i == 1 else {"skip": True}
        ok(admin.put(f"/api/items/{it['id']}", {"version": it["version"], **body}))
    ok(admin.post(f"/api/tasks/{task['id']}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))


def test_a_labelx_admin_without_a_role_sees_the_dataset_as_missing(authed, env: Env) -> None:
    admin = Session(authed, "admin", PASSWORD)
    refused = _project(admin)
    missing = admin.post(
        "/api/projects", {"name": "p2", "dataset": "nopets", "schema": SCHEMA, "task_size": 12}
    )
    assert refused.status_code == 404, refused.text
    assert refused.json()["error"]["code"] == "dataset_not_found"
    # the same words as a missing dataset's, which say how a role is granted
    assert refused.json()["error"]["message"] == missing.json()["error"]["message"].replace("nopets", "pets")
    assert "datahub dataset update pets --grant admin=reader" in refused.json()["error"]["message"]
    assert ok(admin.get("/api/projects")) == []  # nothing was snapshotted


def test_a_reader_makes_projects_and_new_datasets_but_commits_onto_the_dataset_only_as_a_writer(
    authed, env: Env
) -> None:
    _grant(env.catalog, admin="reader")
    admin = Session(authed, "admin", PASSWORD)
    pid = ok(_project(admin), 201)["id"]
    _label_one_and_accept(admin, pid)
    refused = admin.post(f"/api/projects/{pid}/commit", {})
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "access_denied"
    assert "writer" in refused.json()["error"]["message"] and "'pets'" in refused.json()["error"]["message"]
    assert env.catalog.store.head("pets") == 1  # nothing written
    # a new dataset of what the caller may read: like a derive through the API, the caller owns it
    made = ok(admin.post(f"/api/projects/{pid}/commit", {"to_dataset": "pets-mine"}))
    assert made["dataset"] == "pets-mine"
    assert env.catalog.get_dataset("pets-mine").owner == "admin"
    _grant(env.catalog, admin="writer")
    v = ok(admin.post(f"/api/projects/{pid}/commit", {}))
    assert v["dataset"] == "pets" and v["seq"] == 2


def test_access_is_checked_again_at_commit(authed, env: Env) -> None:
    """A role taken away after the project was made is gone for its exports too."""
    _grant(env.catalog, admin="writer")
    admin = Session(authed, "admin", PASSWORD)
    pid = ok(_project(admin), 201)["id"]
    _label_one_and_accept(admin, pid)
    _grant(env.catalog)
    for body in ({}, {"to_dataset": "pets-copy"}):
        refused = admin.post(f"/api/projects/{pid}/commit", body)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "dataset_not_found", body
    assert env.catalog.store.head("pets") == 1
    assert "pets-copy" not in {d.name for d in env.catalog.list_datasets()}


def test_a_labelx_admin_cannot_take_a_principals_roles_by_naming_an_account_after_it(
    authed, env: Env
) -> None:
    """An account is the datahub principal of its name. A LabelX admin with no role on ``pets``
    (404 above) made an account named ``owner`` (the dataset's owner, a principal its admins
    granted), logged in as it and snapshotted every key and picture of ``pets`` into a project:
    making an account was granting that principal's roles. Under an authenticated datahub the
    server's operator makes accounts (``datahub labelx create-user``), never the HTTP API."""
    env.catalog.update_dataset("pets", owner="owner")
    admin = Session(authed, "admin", PASSWORD)
    made = admin.post("/api/users", {"name": "owner", "role": "admin", "password": PASSWORD})
    assert made.status_code == 403, made.text
    message = made.json()["error"]["message"]
    # the whole command, with the server's home (leftovers22)
    assert re.search(r"`datahub --home \S+ labelx create-user owner --role annotator`", message), message
    assert "principal" in message, message
    assert "owner" not in [u["name"] for u in ok(admin.get("/api/users"))]


def test_a_labelx_commit_cannot_create_a_dataset_a_bucket_mount_would_commit_into(authed, env: Env) -> None:
    """``s3.<bucket>.<prefix>`` is where a bucket mount commits its listing, into whatever
    dataset has the name: made by a LabelX account, it was the account's, which then read
    another tenant's bucket through the platform. Only a global admin creates such a name
    (docs/api.md, "Access lists"), and a LabelX account never is one."""
    _grant(env.catalog, admin="reader")
    admin = Session(authed, "admin", PASSWORD)
    pid = ok(_project(admin), 201)["id"]
    _label_one_and_accept(admin, pid)
    refused = admin.post(f"/api/projects/{pid}/commit", {"to_dataset": "s3.platform.team-b"})
    assert refused.status_code == 403, refused.text
    assert "reserved for the snapshots bucket mounts record" in refused.json()["error"]["message"]
    assert "s3.platform.team-b" not in {d.name for d in env.catalog.list_datasets()}
