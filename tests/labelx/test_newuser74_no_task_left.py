"""What "Take next task" says with no task left (newuser74): it said "every task has its
annotator" and no more, shown in red as a failure. The answer (404, ``details.tasks_left`` 0,
which the pages show as information) now says what this user can do next."""

from __future__ import annotations

from tests.labelx.conftest import Session, make_project

SAID = "no task left to take in pets-cls: every task has its annotator. "


def test_no_task_left_says_what_each_user_can_do_next(app) -> None:
    admin = Session(app, "admin")
    pid = make_project(admin, task_size=12, annotators=["alice"])["id"]
    answers = {}
    for name in ("alice", "rita", "admin"):
        resp = Session(app, name).post(f"/api/projects/{pid}/take-task")
        assert resp.status_code == 404, resp.text
        error = resp.json()["error"]
        assert error["details"]["tasks_left"] == 0, error
        answers[name] = error["message"]
    assert answers["alice"] == SAID + "Yours to finish: task 1 (12 items to go)"
    assert answers["rita"] == (
        SAID + "Review the items they submit (the project's review queue), or ask an admin for more work"
    )
    assert answers["admin"] == SAID + (
        "Review the items they submit (the project's review queue), or assign a task to someone else "
        "in the Tasks list"
    )
