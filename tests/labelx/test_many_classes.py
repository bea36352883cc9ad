"""A project of more than ten classes, named as the home page's form names them.

Classes without a key of their own got 1-9 and 0, and an 11th got none: the project was
refused ("class 'k' needs a single-character shortcut key"), and the form, which takes names
only, had no way to give one. Past ten they now get the letters the annotation page leaves
free, by position; past the 28 keys there are, the refusal says how many classes fit.
"""

from __future__ import annotations

from tests.labelx.conftest import Session, make_project

TWELVE = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
    "kite",
    "lamp",
]


def test_a_project_of_twelve_named_classes_is_made_with_a_key_for_each(app) -> None:
    admin = Session(app, "admin")
    project = make_project(admin, schema={"kind": "classification", "classes": TWELVE})
    keys = [c["key"] for c in project["schema"]["classes"]]
    assert keys == ["1", "2", "3", "4", "5", "6", "7", "8", "9", "0", "c", "e"]
    colors = [c["color"] for c in project["schema"]["classes"]]
    assert len(set(colors)) == 12, colors  # the 11th had the 1st's color, its boxes alike


def test_a_key_given_to_one_class_is_not_given_to_another(app) -> None:
    admin = Session(app, "admin")
    classes = ["cat", {"name": "dog", "key": "1"}]  # before: both "1", refused as a clash
    project = make_project(admin, schema={"kind": "classification", "classes": classes})
    assert [c["key"] for c in project["schema"]["classes"]] == ["2", "1"]


def test_more_classes_than_keys_is_refused_saying_how_many_fit(app) -> None:
    admin = Session(app, "admin")
    classes = [f"class{i}" for i in range(29)]
    body = {"name": "many", "dataset": "pets", "schema": {"kind": "classification", "classes": classes}}
    resp = admin.post("/api/projects", body)
    assert resp.status_code == 400, resp.text
    message = resp.json()["error"]["message"]
    assert "class 'class28' gets no shortcut key" in message
    assert "use at most 28 classes" in message
