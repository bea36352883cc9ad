"""newuser22: two labelers on one item.

A save refused because another user had the item open said "item 1 changed since you loaded
it (version 0, you had 0) or another user is editing it; reload to see the latest labels":
the same version twice, no name, and a reload that did not help while they held it.
"""

from __future__ import annotations

from tests.labelx.conftest import Env, Session, make_project, ok


def test_a_save_refused_for_another_user_s_claim_names_them(app, env: Env) -> None:
    admin = Session(app, "admin")
    made = make_project(admin)
    store = app.state.labelx.store
    task = ok(admin.get(f"/api/projects/{made['id']}/tasks"))[0]
    item = store.task_items(task["id"])[0]
    holder = store.user_by_name(task["assignee"])
    store.claim_item(item.id, holder.id)

    resp = admin.put(f"/api/items/{item.id}", {"version": item.version, "value": "cat"})
    assert resp.status_code == 409, resp.text
    error = resp.json()["error"]
    assert (
        error["message"] == f"item {item.id} is being edited by {holder.name}; try again when they are done"
    )
    assert error["details"]["holder"] == holder.name

    # a stale version is still that, whoever holds the item
    store.release_item(item.id, holder.id)
    resp = admin.put(f"/api/items/{item.id}", {"version": item.version + 5, "value": "cat"})
    assert resp.status_code == 409 and "changed since you loaded it" in resp.json()["error"]["message"]
    assert "holder" not in resp.json()["error"]["details"]
    assert ok(admin.put(f"/api/items/{item.id}", {"version": item.version, "value": "cat"}))["value"] == "cat"
