"""review27: an annotator asking for a task or an item of a project they are not a member of
gets the very answer of a task or item that does not exist.

Before, ``GET /api/tasks/<id>`` of another project's task answered 404 "no project with id
<n>" (``details.project``), and a missing task "no task with id <id>": walking the ids told
which tasks and items exist and to which project each belongs, projects the caller is not
shown at all (``GET /api/projects`` lists only their own). Now both say "no task (item) with
id ...", byte for byte alike apart from the id.
"""

from __future__ import annotations

import re

from labelx.auth import hash_password
from tests.labelx.conftest import PASSWORD, Session, make_project


def _body_without_id(resp, ident: int) -> tuple[int, str]:
    return resp.status_code, re.sub(rf"\b{ident}\b", "<id>", resp.text)


def test_another_projects_task_and_item_answer_as_missing_ones(app) -> None:
    app.state.labelx.store.create_user("carol", "annotator", hash_password(PASSWORD))
    admin = Session(app, "admin")
    mine = make_project(admin, "mine", annotators=["alice", "bob"])
    theirs = make_project(admin, "theirs", annotators=["carol"])
    carol = Session(app, "carol")
    [task] = [t for t in admin.get(f"/api/projects/{theirs['id']}/tasks").json()][:1]
    own = admin.get(f"/api/projects/{mine['id']}/tasks").json()[0]
    item = admin.get(f"/api/tasks/{own['id']}").json()["items"][0]
    assert carol.get(f"/api/tasks/{task['id']}").status_code == 200  # her own project's task

    missing_task, missing_item = 10_000, 10_000
    for path, ident, missing in (
        (f"/api/tasks/{own['id']}", own["id"], missing_task),
        (f"/api/items/{item['id']}/image", item["id"], missing_item),
    ):
        got = _body_without_id(carol.get(path), ident)
        want = _body_without_id(carol.get(path.replace(str(ident), str(missing))), missing)
        assert got == want and got[0] == 404, (path, got, want)
        assert str(mine["id"]) not in carol.get(path).json().get("details", {}).values()
    for method, path, ident, missing in (
        ("POST", f"/api/items/{item['id']}/claim", item["id"], missing_item),
        ("PUT", f"/api/items/{item['id']}", item["id"], missing_item),
        ("POST", f"/api/tasks/{own['id']}/submit", own["id"], missing_task),
    ):
        body = {"version": 0, "value": "cat"} if method == "PUT" else None
        got = _body_without_id(carol.send(method, path, body), ident)
        want = _body_without_id(carol.send(method, path.replace(str(ident), str(missing)), body), missing)
        assert got == want and got[0] == 404, (path, got, want)
