"""What newuser31 met committing LabelX labels and naming the admin on the command line.

* Accepted labels the dataset's head already held (a CLI relabel, another project) were
  committed all the same: a new version with no change at all, and the next commit found the
  same items to commit again. Now a commit of only such labels makes no version and says so
  (409), and they count as committed; mixed with real changes, only those are written.
* ``commit --to-dataset`` naming the project's OWN dataset (the dashboard's "Into dataset",
  the API's ``to_dataset``), which makes a NEW dataset, made a new version of the source
  instead. It is refused (400), naming the commit without it.
* ``create-project --user nobody`` (and ``commit``) said "no user 'nobody'; create it first
  (… ``create-user nobody --role annotator`` …)": an annotator may not do either. It names the
  admins there are now.
"""

from __future__ import annotations

import pytest

from datahub.catalog import Patch
from datahub.cli.main import main
from tests.labelx.conftest import PASSWORD, Env, Session, make_project, ok
from tests.labelx.test_newuser29 import _accepted


def test_labels_the_head_already_holds_make_no_version_and_say_so(app, env: Env) -> None:
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    _accepted(app, pid, "img/0003.jpg", "dog")
    _accepted(app, pid, "img/0004.jpg", "bird")
    # someone labels both records the same at the head, outside the project (v2)
    env.catalog.commit(
        "pets",
        [Patch("img/0003.jpg", labels={"class": "dog"}), Patch("img/0004.jpg", labels={"class": "bird"})],
        message="relabel",
    )
    refused = admin.post(f"/api/projects/{pid}/commit", {})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["message"] == (
        "pets@v2 (its head) already holds every accepted label of project 'pets-cls' not yet committed "
        "(2, first: 'img/0003.jpg'), so no version was made: they count as committed now. Accept more "
        "items in review to commit again"
    )
    assert env.catalog.store.head("pets") == 2  # it made v3, with no change
    stats = ok(admin.get(f"/api/projects/{pid}/stats"))
    assert stats["exports"] == []  # v2 is not the project's own commit
    again = admin.post(f"/api/projects/{pid}/commit", {})  # nothing left: the usual answer
    assert again.status_code == 409 and "no accepted label left to commit" in again.text
    # a real change later is committed, alone
    _accepted(app, pid, "img/0005.jpg", "cat")
    v = ok(admin.post(f"/api/projects/{pid}/commit", {}))
    assert (v["seq"], v["modified"]) == (3, 1)


def test_a_commit_of_held_and_new_labels_writes_only_the_new_ones(app, env: Env) -> None:
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    _accepted(app, pid, "img/0003.jpg", "dog")
    _accepted(app, pid, "img/0004.jpg", "bird")
    env.catalog.commit("pets", [Patch("img/0003.jpg", labels={"class": "dog"})], message="relabel")
    v = ok(admin.post(f"/api/projects/{pid}/commit", {}))
    assert (v["seq"], v["modified"]) == (3, 1)
    assert env.catalog.resolve("pets", 3).lineage["changed"] == 1
    assert env.catalog.get_record("pets", 3, "img/0004.jpg").labels == {"class": "bird"}
    assert ok(admin.get(f"/api/projects/{pid}/stats"))["exports"][0]["changed"] == 2
    assert admin.post(f"/api/projects/{pid}/commit", {}).status_code == 409  # both committed


@pytest.mark.parametrize("how", ["api", "cli"])
def test_to_dataset_naming_the_projects_own_dataset_is_refused(
    app, env: Env, tmp_path, capsys, monkeypatch, how: str
) -> None:
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    _accepted(app, pid, "img/0003.jpg", "dog")
    if how == "api":
        refused = admin.post(f"/api/projects/{pid}/commit", {"to_dataset": "pets"})
        assert refused.status_code == 400, refused.text
        said = refused.json()["error"]["message"]
    else:
        monkeypatch.setenv("LABELX_PASSWORD", PASSWORD)
        home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
        rc = main([*home, "labelx", "commit", "pets-cls", "--user", "admin", "--to-dataset", "pets"])
        said = capsys.readouterr().err
        assert rc == 2, said
    assert "'pets' is project 'pets-cls''s own dataset" in said, said
    assert "nothing was committed" in said and "datahub labelx commit pets-cls --user admin" in said, said
    assert env.catalog.store.head("pets") == 1  # it made pets@v2
    assert ok(admin.post(f"/api/projects/{pid}/commit", {}))["seq"] == 2  # without it: the commit


@pytest.mark.parametrize("command", ["create-project", "commit"])
def test_a_user_with_no_account_is_answered_with_the_admins(
    app, env: Env, tmp_path, capsys, command: str
) -> None:
    make_project(Session(app, "admin"))
    args = {
        "create-project": ["create-project", "pets-two", "--dataset", "pets", "--classes", "cat,dog"],
        "commit": ["commit", "pets-cls"],
    }[command]
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    rc = main([*home, "labelx", *args, "--user", "nobody"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "no LabelX user 'nobody': --user names the admin doing this: one of admin" in err, err
    assert "--role annotator" not in err, err
