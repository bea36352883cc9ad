"""What newuser29 met committing LabelX labels into a new dataset.

A commit into a NEW dataset (the dashboard's "Into dataset", ``commit --to-dataset NAME``)
creates the dataset, then commits the project's records into it. Stopped in between (Ctrl-C on
``datahub labelx commit``'s progress line, a crash, a catalog error), it left the dataset made
and empty, and the same command again was refused, "dataset 'NAME' already exists; pick another
name": the name was spent on an empty dataset nobody can remove. Now the retry goes on in the
dataset the stopped commit left (its own: same owner, same description, no version, no access
list), and one a crash left committed but not recorded is returned, as a commit onto the
project's own dataset is. A dataset the project did not leave is still refused.
"""

from __future__ import annotations

import json

import pytest

from datahub.catalog import Put
from datahub.cli.main import main
from datahub.errors import AlreadyExists
from labelx.export import commit_labels
from tests.labelx.conftest import Env, Session, make_project


class Interrupt:
    """``datahub labelx commit``'s progress line, where Ctrl-C lands after ``after`` records."""

    def __init__(self, after: int) -> None:
        self.after = after

    def update(self, n: int = 1) -> None:
        self.after -= n
        if self.after < 0:
            raise KeyboardInterrupt


def _accepted(app, pid: int, key: str, value: str) -> None:
    store = app.state.labelx.store
    item = store.item_by_key(pid, key)
    store.save_value(item.id, store.user_by_name("alice").id, item.version, value, "annotated")
    store.submit_task(item.task_id)
    store.review(item.id, store.user_by_name("admin").id, item.version + 2, True, "")


def test_a_commit_into_a_new_dataset_stopped_midway_goes_on_when_run_again(app, env: Env) -> None:
    pid = make_project(Session(app, "admin"))["id"]
    _accepted(app, pid, "img/0003.jpg", "dog")
    lx = app.state.labelx
    admin = lx.store.user_by_name("admin")
    with pytest.raises(KeyboardInterrupt):
        commit_labels(lx.service, admin, pid, to_dataset="pets-dogs", progress=Interrupt(after=5))
    assert env.catalog.store.head("pets-dogs") == 0  # the stop left the dataset, with no version
    version = commit_labels(lx.service, admin, pid, to_dataset="pets-dogs")  # it said "already exists"
    assert (version.dataset, version.seq, version.added) == ("pets-dogs", 1, 12)
    assert env.catalog.get_record("pets-dogs", 1, "img/0003.jpg").labels == {"class": "dog"}
    assert env.catalog.get_record("pets-dogs", 1, "img/0000.jpg").labels == {"class": "cat"}
    assert [e["dataset"] for e in lx.store.list_exports(pid)] == ["pets-dogs"]
    # a commit already made and recorded is not made again, nor returned as a new one
    with pytest.raises(AlreadyExists, match="dataset 'pets-dogs' already exists; pick another name"):
        commit_labels(lx.service, admin, pid, to_dataset="pets-dogs")


def test_a_crash_after_the_new_datasets_commit_returns_the_version_it_made(app, env: Env) -> None:
    """As a commit onto the project's own dataset does (its commit id): the catalog has the
    version, LabelX has no record of it; the same commit again records that version."""
    pid = make_project(Session(app, "admin"))["id"]
    _accepted(app, pid, "img/0003.jpg", "dog")
    lx = app.state.labelx
    admin = lx.store.user_by_name("admin")
    made = commit_labels(lx.service, admin, pid, to_dataset="pets-dogs")
    with lx.store._write() as db:  # the crash: the catalog committed, LabelX's bookkeeping did not
        db.execute("DELETE FROM exports WHERE project_id=?", (pid,))
    again = commit_labels(lx.service, admin, pid, to_dataset="pets-dogs")
    assert (again.seq, env.catalog.store.head("pets-dogs")) == (made.seq, 1)
    assert [(e["dataset"], e["seq"]) for e in lx.store.list_exports(pid)] == [("pets-dogs", 1)]


def test_a_new_dataset_the_project_did_not_leave_is_still_refused(app, env: Env) -> None:
    pid = make_project(Session(app, "admin"))["id"]
    _accepted(app, pid, "img/0003.jpg", "dog")
    lx = app.state.labelx
    admin = lx.store.user_by_name("admin")
    # someone's empty dataset of that name (another owner, or an access list of its own), and one
    # with a version the project did not make: none is the project's to fill
    ours = "pet pictures (labels from LabelX project pets-cls)"
    env.catalog.create_dataset("theirs", description=ours)
    env.catalog.create_dataset("granted", description=ours, owner="admin", acl={"bob": "reader"})
    env.catalog.create_dataset("made", description=ours, owner="admin")
    rec = env.catalog.get_record("pets", 1, "img/0001.jpg")
    env.catalog.commit("made", [Put(rec)], message="someone else's version")
    for name in ("theirs", "granted", "made"):
        with pytest.raises(AlreadyExists, match=f"dataset {name!r} already exists; pick another name"):
            commit_labels(lx.service, admin, pid, to_dataset=name)
    heads = {name: env.catalog.store.head(name) for name in ("theirs", "granted", "made")}
    assert heads == {"theirs": 0, "granted": 0, "made": 1}


def test_a_projects_id_given_for_its_name_is_answered_with_the_name(
    app, env: Env, tmp_path, capsys, monkeypatch
) -> None:
    """``datahub labelx projects`` lists each project's ID first; ``labelx commit 1`` said "no
    project named '1'", as if the project listed as 1 were gone. It names the project now."""
    pid = make_project(Session(app, "admin"))["id"]
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    for args in (["commit", str(pid), "--user", "admin"], ["export", str(pid), "--format", "csv", "-o", "-"]):
        assert main([*home, "labelx", *args]) == 3
        err = capsys.readouterr().err
        assert (
            f"no project named '{pid}'; project {pid} (its ID) is named 'pets-cls': the commands take the NAME"
            in err
        )
    assert main([*home, "labelx", "commit", "99", "--user", "admin"]) == 3
    err = capsys.readouterr().err
    assert "no project named '99'; list them with" in err and "its ID" not in err


# --- predictions whose keys name no item ----------------------------------------------------------
def test_predictions_none_of_whose_keys_is_an_item_are_refused_saying_what_a_key_is(
    app, env: Env, tmp_path, capsys
) -> None:
    """Keys written relative to a folder (``0003.jpg`` for ``img/0003.jpg``) matched nothing and
    the dashboard said "0 items got a suggestion.", the CLI "suggestions 0", and no more."""
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    preds = "\n".join(json.dumps({"key": f"{i:04d}.jpg", "value": "dog"}) for i in range(3))
    r = admin.post(f"/api/projects/{pid}/suggestions", headers={"content-type": "text/plain"}, content=preds)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == (
        "none of the 3 predictions names an item of project 'pets-cls' (pets@v1): the first names "
        "'0000.jpg', and a prediction's key is its record's whole key in the dataset, as "
        "'img/0000.jpg'; nothing was imported"
    )
    path = tmp_path / "preds.jsonl"
    path.write_text(preds)
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    assert main([*home, "labelx", "preannotate", "pets-cls", "--predictions", str(path)]) == 2
    assert "none of the 3 predictions names an item of project 'pets-cls'" in capsys.readouterr().err
    # some keys unmatched (predictions over a whole dataset, a project of part of it): attached,
    # and the CLI says how many were left out
    path.write_text(preds + "\n" + json.dumps({"key": "img/0003.jpg", "value": "dog"}))
    assert main([*home, "labelx", "preannotate", "pets-cls", "--predictions", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "note: 3 keys of the predictions name no item of project pets-cls (first: '0000.jpg')" in err
    assert app.state.labelx.store.item_by_key(pid, "img/0003.jpg").suggestion["value"] == "dog"


# --- an address's id that is not a number -------------------------------------------------------
def test_an_id_in_the_address_that_is_not_a_number_is_said_in_words(app) -> None:
    """``/labelx/tasks/abc`` (a task's number mistyped) said "invalid request: path.task_id: Input
    should be a valid integer, unable to parse string as an integer" on its error page."""
    admin = Session(app, "admin")
    page = admin.get("/projects/abc", headers={"accept": "text/html"})
    assert page.status_code == 400 and "text/html" in page.headers["content-type"]
    assert "invalid request: project_id: &#39;abc&#39; is not a whole number" in page.text, page.text
    api = admin.get("/api/tasks/abc")
    assert api.status_code == 400
    assert api.json()["error"]["message"] == "invalid request: task_id: 'abc' is not a whole number"
    bad = admin.get("/api/projects/1/export/csv?include=all")  # a query's parameter by its name too
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("invalid request: include: ")
