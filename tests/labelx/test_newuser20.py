"""newuser20: what a new user of LabelX met.

The CSV export is opened in a spreadsheet more often than read by a script: a cell starting
with ``=``, ``+``, ``-``, ``@`` (or tab / CR) is a formula there (``=HYPERLINK(...)`` sends
the reader's click anywhere, DDE runs commands; OWASP "CSV Injection"). Keys and class names
are any text the dataset's writers chose (review19b).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from datahub.catalog import Put, Record
from tests.labelx.conftest import Env, Session, make_project, ok

FORMULAS = ["=HYPERLINK(1)", "+1", "-2", "@SUM(1)", "'quoted"]  # the last: quoted too, to stay reversible
BAD_CLASS = "=cmd|' /C calc'!A0"


def _project_with_formula_keys(app, env: Env) -> tuple[Session, int, list[str]]:
    """pets v2: the 12 pictures plus one per formula key; a project of v2 whose every item is
    labelled (the formula keys with the formula class), submitted and accepted."""
    first = env.catalog.get_record("pets", 1, "img/0000.jpg")
    keys = [f"{f}.jpg" for f in FORMULAS]
    env.catalog.commit("pets", [Put(Record(k, first.url, first.etag, first.size)) for k in keys])
    admin = Session(app, "admin")
    schema = {"kind": "classification", "classes": ["cat", BAD_CLASS]}
    pid = make_project(admin, version=2, schema=schema, annotators=[], task_size=20)["id"]
    store = app.state.labelx.store
    who = store.user_by_name("admin").id
    for item in store.iter_items(pid, ("todo",)):
        value = BAD_CLASS if item.key in keys else "cat"
        store.save_value(item.id, who, item.version, value, "annotated")
    for task in ok(admin.get(f"/api/projects/{pid}/tasks")):
        ok(admin.post(f"/api/tasks/{task['id']}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))
    return admin, pid, keys


def test_the_csv_export_is_safe_in_a_spreadsheet_and_exact_with_raw(app, env: Env, tmp_path: Path) -> None:
    admin, pid, keys = _project_with_formula_keys(app, env)
    resp = admin.get(f"/api/projects/{pid}/export/csv")
    assert resp.status_code == 200, resp.text
    rows = list(csv.reader(io.StringIO(resp.text)))
    assert rows[0] == ["key", "class"]
    cells = [c for row in rows for c in row]
    for cell in cells:  # nothing a spreadsheet evaluates
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), rows
    safe = {row[0]: row[1] for row in rows[1:]}
    for key in keys:  # one leading quote more: strip one to get the key back
        assert safe["'" + key] == "'" + BAD_CLASS
    assert safe["img/0001.jpg"] == "cat"  # ordinary cells unchanged
    # a script asks for the exact text
    raw = list(csv.reader(io.StringIO(admin.get(f"/api/projects/{pid}/export/csv?raw=1").text)))
    exact = {row[0]: row[1] for row in raw[1:]}
    assert {k: exact[k] for k in keys} == dict.fromkeys(keys, BAD_CLASS)
    assert {k.removeprefix("'") for k in safe} == set(exact)

    from datahub.cli.main import main

    cat = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    project = app.state.labelx.store.get_project(pid).name
    for flags, expect in (([], "'" + keys[0]), (["--raw"], keys[0])):
        target = tmp_path / "labels.csv"
        assert main([*cat, "labelx", "export", project, "--format", "csv", *flags, "-o", str(target)]) == 0
        found = {row[0] for row in csv.reader(io.StringIO(target.read_text()))}
        assert expect in found


def test_a_multi_label_class_with_a_semicolon_is_refused_it_would_split_in_the_csv(app, env: Env) -> None:
    """The CSV joins a multi-label value's classes with ';': classes 'a;b' and 'c' labelled
    both came out as 'a;b;c', three labels where there were two. Such a class is refused when
    the project is made; a project made before is refused its CSV (COCO/YOLO are detection)."""
    admin = Session(app, "admin")
    schema = {"kind": "classification", "multi": True, "classes": ["a;b", "c"]}
    body = {"name": "multi", "dataset": "pets", "schema": schema, "annotators": []}
    resp = admin.post("/api/projects", body)
    assert resp.status_code == 400, resp.text
    assert "';'" in resp.json()["error"]["message"] and "a;b" in resp.json()["error"]["message"]
    single = {"kind": "classification", "classes": ["a;b", "c"]}  # one class per value: nothing joined
    pid = make_project(admin, "single", schema=single, annotators=[])["id"]
    assert admin.get(f"/api/projects/{pid}/export/csv").status_code == 200

    # a project stored before the rule
    store = app.state.labelx.store
    made = store.get_project(pid)
    store._conn().execute("UPDATE projects SET schema=? WHERE id=?", (json.dumps(schema), made.id))
    app.state.labelx.service._schemas.clear()
    resp = admin.get(f"/api/projects/{pid}/export/csv")
    assert resp.status_code == 409 and "'a;b'" in resp.json()["error"]["message"], resp.text


def test_a_class_name_with_a_line_break_is_refused_it_would_shift_yolos_class_numbers(app, env: Env) -> None:
    """YOLO's ``classes.txt`` is one class per line and boxes name a class by its line: a
    class 'a\\nb' before 'c' wrote three lines, so every box of 'c' (number 1) read as 'b'.
    A class name with a control character is refused when the project is made; a project made
    before is refused its YOLO export."""
    admin = Session(app, "admin")
    schema = {"kind": "detection", "classes": ["a\nb", "c"]}
    resp = admin.post("/api/projects", {"name": "det", "dataset": "pets", "schema": schema, "annotators": []})
    assert resp.status_code == 400, resp.text
    assert "control character" in resp.json()["error"]["message"]
    pid = make_project(admin, "det", schema={"kind": "detection", "classes": ["ab", "c"]}, annotators=[])[
        "id"
    ]
    store = app.state.labelx.store
    store._conn().execute("UPDATE projects SET schema=? WHERE id=?", (json.dumps(schema), pid))
    app.state.labelx.service._schemas.clear()
    resp = admin.get(f"/api/projects/{pid}/export/yolo")
    assert resp.status_code == 409 and "'a\\nb'" in resp.json()["error"]["message"], resp.text


def test_a_cli_command_run_as_a_non_admin_names_the_admins(app, env: Env, tmp_path: Path, capsys) -> None:
    """``datahub labelx commit P --user alice`` said "user 'alice' is annotator, not admin" and
    not who could do it."""
    from datahub.cli.main import main

    make_project(Session(app, "admin"))
    cat = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    assert main([*cat, "labelx", "commit", "pets-cls", "--user", "alice"]) == 6
    err = capsys.readouterr().err
    assert "user 'alice' is annotator, not admin: this needs --user one of admin" in err, err
