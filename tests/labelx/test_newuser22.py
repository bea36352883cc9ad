"""newuser22: two labelers on one item.

A save refused because another user had the item open said "item 1 changed since you loaded
it (version 0, you had 0) or another user is editing it; reload to see the latest labels":
the same version twice, no name, and a reload that did not help while they held it.

A class given as an object that does not fit named pydantic's branch for a plain name; and
``datahub labelx preannotate --predictions`` given a file that is not UTF-8, or a directory,
ended in "this is a datahub bug". ``datahub labelx export … -o -`` wrote a file named "-".
"""

from __future__ import annotations

import json
from pathlib import Path

from datahub.cli.main import main
from tests.labelx.conftest import SCHEMA, Env, Session, make_project, ok


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


def test_a_class_object_that_does_not_fit_says_which_field_and_its_rule(app, env: Env) -> None:
    """A class given as an object with a bad color, name or key was refused as "schema.classes.0.
    constrained-str: Input should be a valid string" (the branch for a plain name), which says
    neither the field nor the rule; the object's branch says both."""
    admin = Session(app, "admin")
    for spec, field, input_ in (
        ({"name": "cat", "color": "red"}, "color", "red"),
        ({"name": " "}, "name", " "),
        ({"name": "cat", "key": "ab"}, "key", "ab"),
    ):
        body = {"name": "p", "dataset": "pets", "schema": {"kind": "classification", "classes": [spec]}}
        resp = admin.post("/api/projects", body)
        assert resp.status_code == 400, resp.text
        message = resp.json()["error"]["message"]
        assert message.startswith(f"invalid request: schema.classes.0.{field}: {input_!r}: "), message
        assert "constrained-str" not in message and "valid string" not in message, message
    # a name that is not a string at all is still that, at its own field
    resp = admin.post("/api/projects", {"name": 5, "dataset": "pets", "schema": {"classes": ["a"]}})
    assert resp.status_code == 400 and "invalid request: name: " in resp.json()["error"]["message"], resp.text


def test_preannotate_given_a_file_it_cannot_read_as_json_lines_says_so(
    app, env, tmp_path: Path, capsys
) -> None:
    store = app.state.labelx.store
    project = app.state.labelx.service.create_project(
        store.user_by_name("admin"), name="preds", dataset="pets", schema=SCHEMA, task_size=12
    )
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    run = [*home, "labelx", "preannotate", "preds", "--predictions"]
    good = json.dumps({"key": "img/0005.jpg", "value": "dog", "score": 0.9}).encode() + b"\n"
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(good + b'{"key": "img/0006.jpg", "value": "dog", "model": "r\xe9seau"}\n')
    assert main([*run, str(latin1)]) == 2
    assert capsys.readouterr().err == (
        "error: predictions line 2: not UTF-8 text (byte 0xe9 at column 52); "
        "a predictions file is JSON lines in UTF-8; nothing was imported\n"
    )
    assert main([*run, str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"error: cannot read predictions file {tmp_path}: Is a directory; "
        "give a JSON-lines file (one {key, value, score, model} object per line)\n"
    )
    assert all(i.suggestion is None for i in store.iter_items(project.id))  # nothing stored
    latin1.write_bytes(good)
    assert main([*run, str(latin1)]) == 0
    assert store.item_by_key(project.id, "img/0005.jpg").suggestion["value"] == "dog"


def test_labelx_export_o_dash_writes_to_stdout(app, env, tmp_path: Path, monkeypatch, capsys) -> None:
    """``-o`` is required, and ``-o -`` wrote a file named "-": there was no way to pipe an export."""
    store = app.state.labelx.store
    app.state.labelx.service.create_project(
        store.user_by_name("admin"), name="piped", dataset="pets", schema=SCHEMA, task_size=12
    )
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    monkeypatch.chdir(tmp_path)
    assert (
        main([*home, "labelx", "export", "piped", "--format", "csv", "--include", "annotated", "-o", "-"])
        == 0
    )
    said = capsys.readouterr()
    assert said.out == "key,class\r\n" and said.err == (
        "wrote stdout: no label in it: no item of project 'piped' is annotated, in review or accepted yet "
        "(12 to annotate); annotate items first\n"
    ), said
    assert not (tmp_path / "-").exists()


def test_an_uploaded_predictions_line_that_is_not_utf8_is_refused_by_its_number(app, env: Env) -> None:
    """The dashboard's upload read such bytes as U+FFFD: a model's name was stored changed, and a
    key's line matched nothing, unsaid (the CLI refused it, above)."""
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    good = json.dumps({"key": "img/0005.jpg", "value": "dog", "score": 0.9}).encode() + b"\n"
    bad = good + b'{"key": "img/0006.jpg", "value": "dog", "model": "r\xe9seau"}\n'
    resp = admin.send("POST", f"/api/projects/{pid}/suggestions", content=bad)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["message"] == (
        "predictions line 2: not UTF-8 text (byte 0xe9 at column 52); "
        "a predictions file is JSON lines in UTF-8; nothing was imported"
    )
    assert all(i.suggestion is None for i in app.state.labelx.store.iter_items(pid))
    assert ok(admin.send("POST", f"/api/projects/{pid}/suggestions", content=good))["matched"] == 1


def test_a_commit_by_a_non_admin_is_refused_before_any_progress_line(
    app, env: Env, tmp_path: Path, capsys
) -> None:
    """It printed "committing P: 0 0/s stopped by an error" above the refusal, as if a commit had begun."""
    make_project(Session(app, "admin"))
    cat = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    capsys.readouterr()
    assert main([*cat, "labelx", "commit", "pets-cls", "--user", "alice"]) == 6
    assert (
        capsys.readouterr().err
        == "error: user 'alice' is annotator, not admin: this needs --user one of admin\n"
    )


def test_a_commit_over_a_head_without_a_labelled_record_says_what_to_do(app, env: Env) -> None:
    """A record the project labelled, deleted at the dataset's head: the commit failed with the
    catalog's words for a change set's author ("put it first or fix the key"), naming no project."""
    from datahub.catalog import Delete
    from tests.labelx.test_newuser21 import _label_and_accept

    admin = Session(app, "admin")
    pid = make_project(admin, annotators=[])["id"]
    _label_and_accept(admin, app, pid, "dog")
    env.catalog.commit("pets", [Delete("img/0003.jpg")], message="drop one")
    resp = admin.post(f"/api/projects/{pid}/commit", {})
    assert resp.status_code == 404, resp.text
    assert resp.json()["error"]["message"] == (
        "record 'img/0003.jpg', labelled in project 'pets-cls' (from pets@v1), is no longer in pets's head "
        "(v2), so nothing was committed: commit the labels into a new dataset holding the project's records "
        '(the dashboard\'s "Into dataset", `datahub labelx commit pets-cls --user admin --to-dataset NAME`), or make a new project '
        "from pets@latest"
    )
    assert env.catalog.resolve("pets", "latest").seq == 2
    done = ok(admin.post(f"/api/projects/{pid}/commit", {"to_dataset": "pets-labelled"}))
    assert done["dataset"] == "pets-labelled"
    assert env.catalog.get_record("pets-labelled", done["seq"], "img/0003.jpg").labels == {"class": "dog"}
