"""What newuser28 met committing LabelX labels from the shell.

A refused commit (409: no accepted label, into a new dataset or onto the project's own) printed
"committing pets-cls: 0/12 (0%) … stopped by an error" above the refusal, as if a commit had
begun: a command refused before any work prints only the error (docs/cli.md).
"""

from __future__ import annotations

import pytest

from datahub.cli.main import main
from tests.labelx.conftest import PASSWORD, Env, Session, make_project, ok


@pytest.mark.parametrize("into", [[], ["--to-dataset", "pets-empty"]], ids=["own-dataset", "new-dataset"])
def test_a_refused_commit_prints_only_the_error(
    app, env: Env, tmp_path, capsys, monkeypatch, into: list[str]
) -> None:
    make_project(Session(app, "admin"))  # nothing accepted: both commits are refused (409)
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    monkeypatch.setenv("LABELX_PASSWORD", PASSWORD)
    capsys.readouterr()
    rc = main([*home, "labelx", "commit", "pets-cls", "--user", "admin", *into])
    out, err = capsys.readouterr()
    assert rc == 4 and out == "", (rc, out)
    assert err.startswith("error: project 'pets-cls' has no accepted") and err.count("\n") == 1, err


def test_reviewing_an_item_not_yet_submitted_says_so_and_how(app, env: Env) -> None:
    """It said "item 1 cannot be reviewed now (status annotated, version 1, you had 1); reload
    the review queue": the versions agree, and no reload makes the item reviewable."""
    admin = Session(app, "admin")
    pid = make_project(admin, annotators=[])["id"]
    task = ok(admin.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    item = ok(admin.get(f"/api/tasks/{task}"))["items"][0]
    saved = ok(admin.put(f"/api/items/{item['id']}", {"version": item["version"], "value": "cat"}))
    refused = admin.post(f"/api/items/{item['id']}/review", {"version": saved["version"], "accept": True})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["message"] == (
        f"item {item['id']} ({item['key']!r}) is annotated, not submitted: an item is reviewed once its "
        f"task is submitted (the task page's Submit, POST /api/tasks/{task}/submit)"
    )
    stale = admin.post(f"/api/items/{item['id']}/review", {"version": item["version"], "accept": True})
    assert stale.status_code == 409 and "reload the review queue" in stale.json()["error"]["message"]
