"""What newuser32 met committing a LabelX project with nothing to commit yet.

The refusal (409) said "project 'P' has no accepted, changed, not yet exported labels to
commit; review items first" whatever the project's state: a project nobody had annotated was
sent to a review with nothing in it, and "exported" (the commit's bookkeeping) read as
``labelx export``, as if an export had used the labels up. It now says where the project's
items are and the step that gives the commit a label. ``labelx projects`` counted TODO and
ACCEPTED only; it counts every state now. ``labelx export`` of no label wrote a header and
"wrote FILE", as a full export does; it says what the file holds now, and why nothing.
"""

from __future__ import annotations

import json

from datahub.cli.main import main
from tests.labelx.conftest import Env, Session, make_project, ok
from tests.labelx.test_newuser29 import _accepted


def _refusal(admin: Session, pid: int) -> str:
    refused = admin.post(f"/api/projects/{pid}/commit", {})
    assert refused.status_code == 409, refused.text
    return refused.json()["error"]["message"]


def test_a_commit_with_nothing_to_commit_says_where_the_items_are_and_what_to_do(app, env: Env) -> None:
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    assert _refusal(admin, pid) == (
        "project 'pets-cls' has no accepted label left to commit (of its 12 items: 12 still to annotate "
        "or submit); annotate the items and submit their tasks, accept them in review, then commit again"
    )
    store = app.state.labelx.store
    item = store.item_by_key(pid, "img/0005.jpg")
    store.save_value(item.id, store.user_by_name("alice").id, item.version, "dog", "annotated")
    store.submit_task(item.task_id)
    waiting = store.status_counts(pid)["submitted"]
    assert _refusal(admin, pid) == (
        f"project 'pets-cls' has no accepted label left to commit (of its 12 items: {12 - waiting} still "
        f"to annotate or submit, {waiting} waiting for review); accept items in review, then commit again"
    )


def test_a_second_commit_says_the_accepted_labels_are_committed_not_exported(app, env: Env) -> None:
    """One label accepted and committed; the other 11 items untouched."""
    admin = Session(app, "admin")
    pid = make_project(admin, task_size=12, annotators=["alice"])["id"]
    _accepted(app, pid, "img/0003.jpg", "dog")
    assert ok(admin.post(f"/api/projects/{pid}/commit", {}))["seq"] == 2
    message = _refusal(admin, pid)
    assert "export" not in message, message
    assert message.endswith(
        "(of its 12 items: 11 still to annotate or submit, 1 accepted, all committed already or labelled "
        "as pets@v1 has them); annotate the items and submit their tasks, accept them in review, then "
        "commit again"
    ), message


def test_labelx_projects_counts_every_state_of_the_items(app, env: Env, tmp_path, capsys) -> None:
    """``labelx projects`` showed TODO and ACCEPTED only: 30 items submitted for review read
    "30 items, 0 to do, 0 accepted", nowhere. Its columns now count every state, as the
    dashboard does, and add up to the items."""
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    _accepted(app, pid, "img/0003.jpg", "dog")
    store = app.state.labelx.store
    item = store.item_by_key(pid, "img/0005.jpg")
    store.save_value(item.id, store.user_by_name("alice").id, item.version, "dog", "annotated")
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    assert main([*home, "--json", "labelx", "projects"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    counts = {k: row[k] for k in ("todo", "annotated", "skipped", "in_review", "rejected", "accepted")}
    assert counts == {"todo": 10, "annotated": 1, "skipped": 0, "in_review": 0, "rejected": 0, "accepted": 1}
    assert sum(counts.values()) == row["items"] == 12
    store.submit_task(item.task_id)
    assert main([*home, "labelx", "projects"]) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header.split() == [
        "ID", "NAME", "SOURCE", "KIND", "ITEMS", "TODO", "ANNOTATED", "SKIPPED", "IN_REVIEW", "REJECTED", "ACCEPTED",
    ]  # fmt: skip
    assert line.split()[4:] == ["12", "10", "0", "0", "1", "0", "1"]  # 0005 is in review now


def test_labelx_export_says_how_many_labels_it_wrote_and_why_none(app, env: Env, tmp_path, capsys) -> None:
    admin = Session(app, "admin")
    make_project(admin)
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    target = tmp_path / "labels.csv"
    export = [*home, "labelx", "export", "pets-cls", "--format", "csv", "-o", str(target)]
    assert main(export) == 0
    assert target.read_bytes() == b"key,class\r\n"
    assert capsys.readouterr().err == (
        f"wrote {target}: no label in it: no item of project 'pets-cls' is accepted yet (12 to annotate); "
        "accept items in review, or add --include annotated for the labels not reviewed yet\n"
    )
    pid = app.state.labelx.store.project_by_name("pets-cls").id
    _accepted(app, pid, "img/0003.jpg", "dog")
    assert main(export) == 0
    assert target.read_bytes() == b"key,class\r\nimg/0003.jpg,dog\r\n"
    assert capsys.readouterr().err == f"wrote {target}: 1 label of project 'pets-cls' (accepted)\n"
