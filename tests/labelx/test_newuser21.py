"""newuser21: what a new user of LabelX met.

Two labelx.db over one catalog (two teams' LabelX against one datahub, or a LabelX whose
labelx.db was made anew beside the same catalog): each numbers its projects from 1. The
commit id was ``labelx-<project id>-export-<n>`` and a project's own versions were found by
``project_id`` in the lineage, so team B's first commit answered with team A's version as if
it were B's (nothing of B's written), and B's second replaced A's labels with no refusal: A's
commit looked like B's own, whose labels count as seen.
"""

from __future__ import annotations

from pathlib import Path

from datahub.config import load_config
from labelx.app import create_labelx_app
from tests.labelx.conftest import Env, Session, add_users, make_project, ok


def _label_and_accept(admin: Session, app, pid: int, value: str) -> None:
    store = app.state.labelx.store
    who = store.user_by_name("admin").id
    for item in store.iter_items(pid, ("todo",)):
        store.save_value(item.id, who, item.version, value, "annotated")
    for task in ok(admin.get(f"/api/projects/{pid}/tasks")):
        ok(admin.post(f"/api/tasks/{task['id']}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))


def test_two_labelx_homes_over_one_catalog_keep_each_others_labels(app, env: Env, tmp_path: Path) -> None:
    other_config = load_config(env={}, overrides={"home": str(tmp_path / "other")})
    other = create_labelx_app(other_config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    add_users(other, admin="admin")
    try:
        a, b = Session(app, "admin"), Session(other, "admin")
        pa, pb = make_project(a, annotators=[])["id"], make_project(b, annotators=[])["id"]
        assert pa == pb  # each labelx.db numbers its projects from 1
        _label_and_accept(a, app, pa, "dog")
        assert ok(a.post(f"/api/projects/{pa}/commit", {}))["seq"] == 2
        _label_and_accept(b, other, pb, "bird")

        # B never saw A's "dog": refused, nothing written (it answered 200 with A's v2)
        resp = b.post(f"/api/projects/{pb}/commit", {})
        assert resp.status_code == 409, resp.text
        assert "nobody in the project saw" in resp.json()["error"]["message"]
        assert "img/0001.jpg: None -> 'dog'" in resp.json()["error"]["message"]
        assert ok(b.get(f"/api/projects/{pb}/stats"))["exports"] == []
        # and again: still refused (the second try replaced A's labels without a word)
        assert b.post(f"/api/projects/{pb}/commit", {}).status_code == 409
        assert env.catalog.resolve("pets", "latest").seq == 2
        assert env.catalog.get_record("pets", 2, "img/0001.jpg").labels == {"class": "dog"}

        # on purpose: B's own version, with B's labels
        done = ok(b.post(f"/api/projects/{pb}/commit", {"overwrite": True}))
        assert (done["seq"], done["modified"]) == (3, 12)
        assert env.catalog.get_record("pets", 3, "img/0001.jpg").labels == {"class": "bird"}
        lineages = [v.lineage for v in env.catalog.log("pets")][:2]
        assert lineages[0]["instance"] != lineages[1]["instance"]
    finally:
        other.state.labelx.store.close()
