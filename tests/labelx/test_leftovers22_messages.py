"""leftovers22: a LabelX message that names a command names all of it: its project, user and
options, and the home its labelx.db is in where the server's is not the caller's. Before, they
named a bare ``datahub labelx create-user`` (no name), ``datahub labelx commit --overwrite``
(no project, no ``--user``: the CLI refuses both) and ``datahub export`` (no dataset). Each
command is parsed here by the CLI's own parser, as written."""

from __future__ import annotations

import re
import shlex
import sqlite3

import pytest

from datahub.catalog.model import Patch
from datahub.cli.main import build_parser
from datahub.errors import DatahubError
from labelx.service import LabelService
from tests.labelx.conftest import Env, Session, make_project, ok


def _command(message: str, starts: str) -> str:
    """The command between backticks in ``message`` that begins with ``starts``; it parses."""
    commands = [c for c in re.findall(r"`(datahub [^`]*)`", message) if c.startswith(starts)]
    assert commands, f"no `{starts} …` in: {message}"
    try:
        build_parser().parse_args(shlex.split(commands[0])[1:])
    except SystemExit:
        pytest.fail(f"`{commands[0]}` does not parse, in: {message}")
    return commands[0]


def test_a_missing_user_names_the_create_user_command_whole(app) -> None:
    with pytest.raises(DatahubError) as caught:
        app.state.labelx.store.user_by_name("ghost")
    assert _command(caught.value.message, "datahub labelx create-user") == (
        "datahub labelx create-user ghost --role annotator"
    )
    with pytest.raises(DatahubError) as caught:
        app.state.labelx.store.set_password("ghost", "x")
    assert _command(caught.value.message, "datahub labelx create-user").endswith("ghost --role annotator")


def test_a_bad_token_names_create_token_with_its_account(app) -> None:
    resp = Session(app, "admin").client.get("/api/projects", headers={"Authorization": "Bearer nope"})
    assert resp.status_code == 401
    assert _command(resp.json()["error"]["message"], "datahub labelx create-token").startswith(
        "datahub labelx create-token NAME"
    )


def test_an_account_under_an_authenticated_datahub_names_the_servers_home(app) -> None:
    store = app.state.labelx.store
    service = LabelService(store, app.state.labelx.service.catalog, dataset_acl=True)
    with pytest.raises(DatahubError) as caught:
        service.require_account_maker(store.user_by_name("admin"), "carol")
    command = _command(caught.value.message, "datahub --home")
    home = store.path.rsplit("/", 1)[0]
    assert command == f"datahub --home {shlex.quote(home)} labelx create-user carol --role annotator"


def test_a_refused_commit_names_the_commit_over_command_whole(app, env: Env) -> None:
    admin = Session(app, "admin")
    pid = make_project(admin, annotators=["admin"])["id"]
    store = app.state.labelx.store
    who = store.user_by_name("admin").id
    for item in store.iter_items(pid, ("todo",)):
        store.save_value(item.id, who, item.version, "dog", "annotated")
    for task in ok(admin.get(f"/api/projects/{pid}/tasks")):
        ok(admin.post(f"/api/tasks/{task['id']}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))
    env.catalog.commit("pets", [Patch(env.keys[1], labels={"class": "bird"})], message="someone else")
    resp = admin.post(f"/api/projects/{pid}/commit", {})
    assert resp.status_code == 409, resp.text
    assert _command(resp.json()["error"]["message"], "datahub labelx commit") == (
        "datahub labelx commit pets-cls --user admin --overwrite"
    )


def test_a_refused_csv_export_names_the_commit_and_export_commands(app, env: Env) -> None:
    admin = Session(app, "admin")
    schema = {"kind": "classification", "multi": True, "classes": ["a", "b"]}
    pid = make_project(admin, name="multi", schema=schema, annotators=["admin"])["id"]
    db = sqlite3.connect(app.state.labelx.store.path)  # a project made before the ';' rule
    with db:
        old = {**schema, "field": "class", "classes": [{"name": "a;b", "color": "#000000", "key": "1"},
                                                       {"name": "c", "color": "#ffffff", "key": "2"}]}  # fmt: skip
        db.execute("UPDATE projects SET schema=? WHERE id=?", (__import__("json").dumps(old), pid))
    db.close()
    resp = admin.get(f"/api/projects/{pid}/export/csv")
    assert resp.status_code == 409, resp.text
    message = resp.json()["error"]["message"]
    assert _command(message, "datahub labelx commit") == "datahub labelx commit multi --user ADMIN"
    assert _command(message, "datahub export") == "datahub export pets -o labels.jsonl"
