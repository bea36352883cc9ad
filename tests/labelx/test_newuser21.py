"""newuser21: what a new user of LabelX met.

Two labelx.db over one catalog (two teams' LabelX against one datahub, or a LabelX whose
labelx.db was made anew beside the same catalog): each numbers its projects from 1. The
commit id was ``labelx-<project id>-export-<n>`` and a project's own versions were found by
``project_id`` in the lineage, so team B's first commit answered with team A's version as if
it were B's (nothing of B's written), and B's second replaced A's labels with no refusal: A's
commit looked like B's own, whose labels count as seen.
"""

from __future__ import annotations

import re
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


def test_a_box_or_a_score_of_nan_or_infinity_is_refused_where_it_is_sent(app, env: Env) -> None:
    """Python's JSON reader takes NaN and Infinity, and NaN passes every range check as False:
    a box [NaN, 0, 0.5, 0.5] was saved, submitted and accepted, written into the COCO file as
    ``NaN`` (not JSON), and only the catalog refused it, at commit ("labels is not plain
    JSON"), naming no item a LabelX user could fix. A suggestion's score of NaN likewise."""
    admin = Session(app, "admin")
    schema = {"kind": "detection", "classes": ["cat", "dog"]}
    pid = make_project(admin, name="boxes", schema=schema, annotators=["admin"])["id"]
    task = ok(admin.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    item = ok(admin.get(f"/api/tasks/{task}"))["items"][0]
    ok(admin.post(f"/api/items/{item['id']}/claim"))
    headers = {"Content-Type": "application/json"}
    for bad in ("NaN", "Infinity", "-Infinity"):
        for bbox in (f"[{bad}, 0, 0.5, 0.5]", f"[0, 0, {bad}, 0.5]"):
            body = f'{{"version": {item["version"]}, "value": [{{"label": "cat", "bbox": {bbox}}}]}}'
            resp = admin.send("PUT", f"/api/items/{item['id']}", content=body, headers=headers)
            assert resp.status_code == 400, (bbox, resp.text)
            assert "must be 4 numbers: fractions 0..1 of the image" in resp.json()["error"]["message"]
    assert app.state.labelx.store.get_item(item["id"]).value is None  # nothing saved
    lines = [
        f'{{"key": "{env.keys[0]}", "value": [{{"label": "cat", "bbox": [NaN, 0, 0.5, 0.5]}}]}}',
        f'{{"key": "{env.keys[0]}", "value": [{{"label": "cat", "bbox": [0, 0, 0.5, 0.5]}}], "score": NaN}}',
        f'{{"key": "{env.keys[0]}", "value": [{{"label": "cat", "bbox": [0, 0, 0.5, 0.5]}}], "score": true}}',
    ]
    for line in lines:
        resp = admin.post(f"/api/projects/{pid}/suggestions", content=line)
        assert resp.status_code == 400, (line, resp.text)
        assert "predictions line 1" in resp.json()["error"]["message"]
    assert app.state.labelx.store.get_item(item["id"]).suggestion is None


def test_signing_in_again_comes_back_to_the_page_the_session_ended_on(app, env: Env) -> None:
    """A session ends after 12 h: a page opened (or a save sent, labelx/static/common.js) after
    that went to the login form and from there to the project list, whatever page it was."""
    from fastapi.testclient import TestClient

    from tests.labelx.conftest import PASSWORD

    admin = Session(app, "admin")
    task = ok(admin.get(f"/api/projects/{make_project(admin)['id']}/tasks"))[0]["id"]
    client = TestClient(app, base_url="http://127.0.0.1")
    html = {"Accept": "text/html"}
    resp = client.get(f"/tasks/{task}?x=1", headers=html, follow_redirects=False)
    assert (resp.status_code, resp.headers["location"]) == (303, f"/login?next=%2Ftasks%2F{task}%3Fx%3D1")

    def sign_in(next_: str, password: str = PASSWORD):
        page = client.get("/login", params={"next": next_}).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)[1]
        form = {"name": "admin", "password": password, "csrf": csrf, "next": next_}
        return page, client.post("/login", data=form, follow_redirects=False)

    page, resp = sign_in(f"/tasks/{task}", "wrong password")
    assert f'name="next" value="/tasks/{task}"' in page
    assert resp.headers["location"] == f"/login?error=wrong&next=%2Ftasks%2F{task}"  # kept for the retry
    assert sign_in(f"/tasks/{task}")[1].headers["location"] == f"/tasks/{task}"
    for elsewhere in (
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example",
        "/\t/evil.example",
        "/login",
    ):
        page, resp = sign_in(elsewhere)
        assert 'name="next" value="/"' in page and resp.headers["location"] == "/", elsewhere
