"""What newuser26 met making LabelX projects with odd input.

"Annotators: alice, alice" made the project, counted two annotators for its one task and said
"Created q11 with 4 items.  have no task: 1 task of up to 50 items for 2 annotators; …" (no
name: alice had the task); `create-project --annotators alice,alice` printed the same
nameless note. A name given twice is refused, naming it, by the form, the API and the CLI.
"""

from __future__ import annotations

from datahub.cli.main import main
from tests.labelx.conftest import PASSWORD, SCHEMA, Session
from tests.labelx.test_newuser25 import _create


def test_an_annotator_named_twice_is_refused_by_name(app) -> None:
    admin = Session(app, "admin")
    body = {"name": "twice", "dataset": "pets", "schema": SCHEMA, "annotators": ["alice", "bob", "alice"]}
    resp = admin.post("/api/projects", body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["message"] == (
        "annotator(s) named more than once for project 'twice': alice; name each annotator once "
        "(a typo for another name?)"
    )
    assert admin.get("/api/projects").json() == []  # nothing made
    body["annotators"] = ["alice", "bob"]
    assert admin.post("/api/projects", body).status_code == 201


def test_create_project_refuses_an_annotator_named_twice(app, env, tmp_path, capsys, monkeypatch) -> None:
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    monkeypatch.setenv("LABELX_PASSWORD", PASSWORD)
    made = [
        *home,
        "labelx",
        "create-project",
        "p",
        "--dataset",
        "pets",
        "--classes",
        "cat,dog",
        "--user",
        "admin",
    ]
    assert main([*made, "--annotators", "alice, alice"]) == 2
    out, err = capsys.readouterr()
    assert "have no task" not in err
    assert "annotator(s) named more than once for project 'p': alice; name each annotator once" in err, err
    made_once, err = _create(env, tmp_path, capsys, monkeypatch, "--annotators", "alice", name="p")
    assert made_once["items"] == 12 and err == ""


def test_a_project_with_no_class_says_so_in_words(app) -> None:
    """The form's Classes ' , ' (every name blank) sent no class: the page said pydantic's
    'schema.classes: List should have at least 1 item after validation, not 0'."""
    admin = Session(app, "admin")
    body = {"name": "none", "dataset": "pets", "schema": {"kind": "classification", "classes": []}}
    resp = admin.post("/api/projects", body)
    assert resp.status_code == 400, resp.text
    assert (
        resp.json()["error"]["message"] == "invalid request: schema.classes: needs at least 1 entry, got none"
    )
    body["schema"]["classes"] = [f"c{i}" for i in range(65)]
    assert admin.post("/api/projects", body).json()["error"]["message"] == (
        "invalid request: schema.classes: takes at most 64 entries, got 65"
    )


def test_a_dataset_given_with_its_version_says_where_the_version_goes(app) -> None:
    """The New project form's Dataset 'pets@v1' said only the name rule."""
    admin = Session(app, "admin")
    body = {"name": "at", "dataset": "pets@v1", "schema": SCHEMA}
    said = admin.post("/api/projects", body).json()["error"]["message"]
    assert said.endswith("; a version goes in its own field: dataset 'pets', version 'v1'"), said
    body["name"] = "pets@v1"  # not the dataset field: the name rule alone
    body["dataset"] = "pets"
    assert "version goes" not in admin.post("/api/projects", body).json()["error"]["message"]
