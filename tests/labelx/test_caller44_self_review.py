"""caller44: a reviewer does not review their own labels.

Reviewers see every project and may take its open tasks ("Take next task"; an admin may also
assign them one). Then they labelled the items, submitted them and accepted them themselves:
the review, another person's look at each label, was one person's, and the dashboard counted
the labels as reviewed. A reviewer's review of an item they labelled is now 403 naming it; an
admin (who runs the project, and in ``make run`` is the only account) still may.
"""

from __future__ import annotations

from tests.labelx.conftest import Session, make_project, ok


def _label_and_submit(who: Session, task_id: int) -> list[dict]:
    view = ok(who.get(f"/api/tasks/{task_id}"))
    for item in view["items"]:
        ok(who.post(f"/api/items/{item['id']}/claim"))
        ok(who.put(f"/api/items/{item['id']}", {"version": item["version"], "value": "cat"}))
    ok(who.post(f"/api/tasks/{task_id}/submit"))
    return view["items"]


def test_a_reviewer_cannot_accept_labels_they_gave(app) -> None:
    admin, rita = Session(app, "admin"), Session(app, "rita")
    pid = make_project(admin, assign="claim")["id"]
    tid = ok(rita.post(f"/api/projects/{pid}/take-task"))["task_id"]
    items = {i["id"] for i in _label_and_submit(rita, tid)}
    queue = [q for q in ok(rita.get(f"/api/projects/{pid}/review")) if q["id"] in items]
    assert queue
    refused = rita.post(
        f"/api/items/{queue[0]['id']}/review", {"version": queue[0]["version"], "accept": True}
    )
    assert refused.status_code == 403, refused.text
    message = refused.json()["error"]["message"]
    assert "labelled by you" in message and "another reviewer or an admin" in message, message
    rejected = rita.post(
        f"/api/items/{queue[0]['id']}/review",
        {"version": queue[0]["version"], "accept": False, "comment": "mine, sloppy"},
    )
    assert rejected.status_code == 403, rejected.text
    assert ok(admin.get(f"/api/projects/{pid}/stats"))["counts"].get("accepted", 0) == 0

    # another reviewer (here the admin) reviews them; the admin's own labels they may review
    for q in queue:
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))
    tid2 = ok(admin.post(f"/api/projects/{pid}/take-task"))["task_id"]
    own = {i["id"] for i in _label_and_submit(admin, tid2)}
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        if q["id"] in own:
            ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))
