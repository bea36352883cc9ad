"""leftovers22: a box of NaN or Infinity saved before LabelX refused them (newuser21).

Such a box, in a labelx.db written by the older LabelX, failed every commit of its project in
the catalog ("not plain JSON"), naming no item, and its task page could not be written as
JSON: the project's labels were stuck. The rows here are written as the old code wrote them
(``dump_json`` of what Python's JSON reader took). Such a box has no place in the image, so
its item is sent back to annotation with that box taken out, the others kept, a comment
naming it; the project's other labels commit.
"""

from __future__ import annotations

import math
import sqlite3

from labelx.entities import dump_json
from labelx.store import LabelStore
from tests.labelx.conftest import Env, Session, make_project, ok

NAN_BOX = {"label": "cat", "bbox": [math.nan, 0.0, 0.5, 0.5]}
DOG_BOX = {"label": "dog", "bbox": [0.1, 0.1, 0.2, 0.2]}


def _accepted_boxes(app, admin: Session) -> tuple[int, int]:
    """A detection project whose items are all accepted with one dog box; (project, task)."""
    pid = make_project(admin, name="boxes", schema={"kind": "detection", "classes": ["cat", "dog"]},
                       annotators=["admin"])["id"]  # fmt: skip
    store = app.state.labelx.store
    who = store.user_by_name("admin").id
    for item in store.iter_items(pid, ("todo",)):
        store.save_value(item.id, who, item.version, [DOG_BOX], "annotated")
    tasks = ok(admin.get(f"/api/projects/{pid}/tasks"))
    for task in tasks:
        ok(admin.post(f"/api/tasks/{task['id']}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))
    return pid, tasks[0]["id"]


def _write_as_the_old_code(path: str, key: str, **columns) -> None:
    db = sqlite3.connect(path)
    with db:
        for column, value in columns.items():
            db.execute(f"UPDATE items SET {column}=? WHERE key=?", (dump_json(value), key))
    db.close()


def test_a_nan_box_in_an_open_labelx_db_is_refused_at_commit_naming_it_then_sent_back(app, env: Env) -> None:
    admin = Session(app, "admin")
    pid, task = _accepted_boxes(app, admin)
    key = env.keys[0]
    _write_as_the_old_code(app.state.labelx.store.path, key, value=[NAN_BOX, DOG_BOX])
    head = env.catalog.resolve("pets", "latest").seq

    resp = admin.post(f"/api/projects/{pid}/commit", {})
    assert resp.status_code == 409, resp.text
    message = resp.json()["error"]["message"]
    assert "project 'boxes'" in message and f"{key}: box 1 ('cat' at [nan, 0.0, 0.5, 0.5])" in message
    assert "`datahub labelx commit boxes --user admin`" in message
    assert env.catalog.resolve("pets", "latest").seq == head  # nothing committed

    item = app.state.labelx.store.item_by_key(pid, key)
    assert (item.status, item.value) == ("rejected", [DOG_BOX])  # the other box kept
    assert "box 1 ('cat' at [nan, 0.0, 0.5, 0.5])" in item.comment and "draw it again" in item.comment
    ok(admin.get(f"/api/tasks/{task}"))  # its page loads

    done = ok(admin.post(f"/api/projects/{pid}/commit", {}))  # the other labels
    assert done["modified"] == len(env.keys) - 1
    assert env.catalog.get_record("pets", done["seq"], env.keys[1]).labels == {"boxes": [DOG_BOX]}
    assert env.catalog.get_record("pets", done["seq"], key).labels == {"class": "cat"}  # as it was


def test_a_labelx_db_written_before_the_rule_sends_its_nan_boxes_back_when_opened(app, env: Env) -> None:
    admin = Session(app, "admin")
    pid, task = _accepted_boxes(app, admin)
    path = app.state.labelx.store.path
    inf_box = {"label": "dog", "bbox": [0.0, 0.0, math.inf, 0.5]}
    _write_as_the_old_code(path, env.keys[0], value=[DOG_BOX, inf_box])
    _write_as_the_old_code(path, env.keys[1], suggestion={"value": [DOG_BOX], "score": math.nan})
    db = sqlite3.connect(path)
    with db:
        db.execute("DELETE FROM meta WHERE key='nonfinite_sent_back'")  # a file of the older LabelX
    db.close()

    LabelStore(path).close()  # opened by this LabelX
    store = app.state.labelx.store
    item = store.item_by_key(pid, env.keys[0])
    assert (item.status, item.value) == ("rejected", [DOG_BOX])
    assert "box 2 ('dog' at [0.0, 0.0, inf, 0.5])" in item.comment
    assert store.item_by_key(pid, env.keys[1]).suggestion is None  # a model's, not a person's
    assert store.item_by_key(pid, env.keys[1]).value == [DOG_BOX]
    ok(admin.get(f"/api/tasks/{task}"))
    done = ok(admin.post(f"/api/projects/{pid}/commit", {}))
    assert done["modified"] == len(env.keys) - 1
