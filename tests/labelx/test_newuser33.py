"""newuser33: a description copied into a new dataset names no dataset its readers may not read.

A pack target made before ``datahub pack`` stopped naming its source is described ``packed from
SRC@vN``; the API hides SRC from a reader of the target who may not read it
(``LineageView.dataset``), but only when that was the whole description. A LabelX commit into a
new dataset copied it with `` (labels from LabelX project P)`` added, so the hiding no longer
matched and the new dataset's readers, who may read neither, read SRC's name; a derive into a
new dataset copied it too. Now a copy says ``packed by datahub pack`` in its place, and a
description written before by such a copy is shown hidden wherever the name stands in it.
"""

from __future__ import annotations

from datahub.api.access import Principal
from datahub.api.lineage import LineageView
from datahub.catalog.descriptions import copyable
from tests.labelx.conftest import Session, make_project, ok

OLD = "packed from secretsrc@v3"


def _accept_all(app, env) -> int:
    admin = Session(app, "admin")
    pid = make_project(admin, task_size=12, annotators=["alice"])["id"]
    alice = Session(app, "alice")
    tid = ok(alice.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    for it in ok(alice.get(f"/api/tasks/{tid}"))["items"]:
        ok(alice.put(f"/api/items/{it['id']}", {"version": it["version"], "value": "dog"}))
    ok(alice.post(f"/api/tasks/{tid}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))
    return pid


def test_a_labelx_commit_into_a_new_dataset_does_not_copy_the_source_name(app, env) -> None:
    env.catalog.update_dataset("pets", description=OLD)  # a pack target made before
    pid = _accept_all(app, env)
    v = ok(Session(app, "admin").post(f"/api/projects/{pid}/commit", {"to_dataset": "pets-relabelled"}))
    assert (v["dataset"], v["seq"]) == ("pets-relabelled", 1)
    made = env.catalog.get_dataset("pets-relabelled")
    assert made.description == "packed by datahub pack (labels from LabelX project pets-cls)"


def test_a_derive_into_a_new_dataset_does_not_copy_the_source_name(env) -> None:
    env.catalog.update_dataset("pets", description=f"{OLD}, then relabelled")
    env.catalog.derive("pets", 1, "labels.class=cat", to_dataset="cats", owner="bob")
    assert env.catalog.get_dataset("cats").description == "packed by datahub pack, then relabelled"


def test_a_description_a_copy_wrote_before_is_shown_hidden_to_a_reader_of_it_only(env) -> None:
    """What a LabelX commit into a new dataset wrote before: eve (a reader of it, not of
    secretsrc) sees the name hidden; alice (a reader of secretsrc) sees it as written."""
    catalog = env.catalog
    catalog.create_dataset("secretsrc", owner="bob", acl={"alice": "reader"})
    written = f"{OLD} (labels from LabelX project pets-cls)"
    catalog.create_dataset(
        "relabelled", description=written, owner="bob", acl={"eve": "reader", "alice": "reader"}
    )
    d = catalog.get_dataset("relabelled")
    eve = LineageView(Principal("eve"), catalog.get_dataset).dataset(d)
    assert eve.description == "packed from (hidden dataset) (labels from LabelX project pets-cls)"
    assert LineageView(Principal("alice"), catalog.get_dataset).dataset(d).description == written
    # a deleted or never-made source reads as one nobody may read
    catalog.update_dataset("pets", description="see packed from gone@v1 and packed from secretsrc@v2")
    shown = LineageView(Principal("alice"), catalog.get_dataset).dataset(catalog.get_dataset("pets"))
    assert shown.description == "see packed from (hidden dataset) and packed from secretsrc@v2"


def test_copyable_leaves_other_text_as_written() -> None:
    assert copyable("pet pictures") == "pet pictures"
    assert copyable(OLD) == "packed by datahub pack"
