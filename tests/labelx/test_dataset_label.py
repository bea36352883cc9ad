"""An item keeps its record's label as the dataset version has it, also one the schema has no
class for, and says what a commit does to it.

Before, a project of classes cat/dog/bird made from a version where a record said ``truck``
kept nothing of it (``original`` only held a value of the schema): the page showed
"Label: —" and no "In pets@v2: truck", and a class picked there replaced ``truck`` at commit
with nobody having seen it. Now the item's JSON carries ``dataset_label`` ("truck") and
``dataset_label_fits`` (false); a picked class replaces it at commit, a skipped item keeps it.
A labelx.db made before the column existed opens, and its projects read those labels from the
catalog once.
"""

from __future__ import annotations

import sqlite3

from datahub.catalog import Patch, open_catalog
from labelx.app import create_labelx_app
from tests.labelx.conftest import Session, make_project, ok

TRUCK, SHIP = "img/0001.jpg", "img/0002.jpg"


def _relabel(env) -> int:
    """pets@v2: two records labelled with classes the project does not have."""
    version = env.catalog.commit(
        "pets",
        [Patch(TRUCK, labels={"class": "truck"}), Patch(SHIP, labels={"class": "ship"})],
        message="more",
    )
    return version.seq


def _items(s: Session, pid: int) -> dict[str, dict]:
    tid = ok(s.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    return {i["key"]: i for i in ok(s.get(f"/api/tasks/{tid}"))["items"]}


def test_a_label_outside_the_classes_is_kept_and_shown_as_the_dataset_has_it(app, env):
    seq = _relabel(env)
    admin = Session(app, "admin")
    pid = make_project(admin, version=seq)["id"]
    items = _items(admin, pid)
    truck = items[TRUCK]
    assert (truck["dataset_label"], truck["dataset_label_fits"]) == ("truck", False)
    assert truck["original"] is None and truck["value"] is None  # not a starting value: no class fits
    cat = items["img/0000.jpg"]  # a label of the schema: shown, and the starting value as before
    assert (cat["dataset_label"], cat["dataset_label_fits"], cat["original"], cat["value"]) == (
        "cat",
        True,
        "cat",
        "cat",
    )
    none = items["img/0003.jpg"]
    assert (none["dataset_label"], none["dataset_label_fits"]) == (None, True)


def test_a_picked_class_replaces_it_at_commit_and_a_skip_keeps_it(app, env):
    seq = _relabel(env)
    admin, alice, rita = Session(app, "admin"), Session(app, "alice"), Session(app, "rita")
    pid = make_project(admin, version=seq)["id"]
    items = _items(alice, pid)
    for key, it in items.items():  # a preset label is confirmed; the others get "dog", but SHIP is skipped
        skip = key == SHIP
        body = {"version": it["version"], "value": None if skip else it["value"] or "dog", "skip": skip}
        ok(alice.put(f"/api/items/{it['id']}", body))
    tid = next(iter(items.values()))["task_id"]
    ok(alice.post(f"/api/tasks/{tid}/submit"))
    queue = {q["key"]: q for q in ok(rita.get(f"/api/projects/{pid}/review"))}
    # the reviewer sees what the accepted label replaces
    assert (queue[TRUCK]["dataset_label"], queue[TRUCK]["dataset_label_fits"]) == ("truck", False)
    assert SHIP not in queue
    for q in queue.values():
        ok(rita.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))
    # the dashboard says how many such labels the commit replaces: TRUCK's, not the skipped SHIP's
    assert ok(admin.get(f"/api/projects/{pid}/stats"))["replaces_unfit"] == 1
    v = ok(admin.post(f"/api/projects/{pid}/commit", {}))
    assert ok(admin.get(f"/api/projects/{pid}/stats"))["replaces_unfit"] == 0
    assert env.catalog.get_record("pets", v["seq"], TRUCK).labels == {"class": "dog"}
    assert env.catalog.get_record("pets", v["seq"], SHIP).labels == {"class": "ship"}


def _make_old(path: str) -> None:
    """The labelx.db as it was before ``dataset_label``: same tables without the new columns."""
    db = sqlite3.connect(path)
    with db:
        db.execute("ALTER TABLE items DROP COLUMN dataset_label")
        db.execute("ALTER TABLE projects DROP COLUMN dataset_labels_read")
    db.close()


def test_an_old_labelx_db_opens_and_reads_the_labels_it_did_not_keep(app, env):
    seq = _relabel(env)
    admin = Session(app, "admin")
    pid = make_project(admin, version=seq)["id"]
    path = app.state.labelx.store.path
    app.state.labelx.store.close()
    _make_old(path)
    columns = {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(items)")}
    assert "dataset_label" not in columns

    again = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    try:
        admin, alice = Session(again, "admin"), Session(again, "alice")
        items = _items(alice, pid)
        assert (items[TRUCK]["dataset_label"], items[TRUCK]["dataset_label_fits"]) == ("truck", False)
        assert (items["img/0000.jpg"]["dataset_label"], items["img/0000.jpg"]["dataset_label_fits"]) == (
            "cat",
            True,
        )
        # and it works: a label saves, a new project is made in the migrated file
        it = items[TRUCK]
        saved = ok(alice.put(f"/api/items/{it['id']}", {"version": it["version"], "value": "dog"}))
        assert (saved["value"], saved["dataset_label"]) == ("dog", "truck")
        other = make_project(admin, name="pets-again", version=seq)["id"]
        assert _items(admin, other)[SHIP]["dataset_label"] == "ship"
    finally:
        again.state.labelx.store.close()


def test_an_old_project_whose_dataset_is_gone_still_opens(app, env, tmp_path):
    """The catalog LabelX now serves has no such dataset (another catalog): the items show what
    the file kept (the labels that fitted the schema), and the next start tries again."""
    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    path = app.state.labelx.store.path
    app.state.labelx.store.close()
    _make_old(path)
    other = open_catalog(f"sqlite:///{tmp_path / 'other.db'}")

    again = create_labelx_app(env.config, catalog=other, stores=env.stores, cache=env.cache)
    try:
        items = _items(Session(again, "alice"), pid)
        assert (items["img/0000.jpg"]["original"], items["img/0000.jpg"]["dataset_label"]) == ("cat", "cat")
        assert not again.state.labelx.store.get_project(pid).dataset_labels_read
    finally:
        again.state.labelx.store.close()
        other.close()


def test_an_old_project_opens_and_saves_while_the_catalog_is_down(app, env, monkeypatch):
    """review13c: the one-time read of an old project's labels ran inside its first request,
    and a catalog that was down (not a missing dataset) failed the project's pages, saving a
    label included, which needed only labelx.db before. They work; the read is tried again."""
    from datahub.errors import CatalogUnavailable

    admin = Session(app, "admin")
    pid = make_project(admin)["id"]
    path = app.state.labelx.store.path
    app.state.labelx.store.close()
    _make_old(path)
    again = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    try:

        def down(*_args, **_kwargs):
            raise CatalogUnavailable("the catalog is down (test)")

        monkeypatch.setattr(env.catalog.store, "get_records", down)
        alice = Session(again, "alice")
        it = _items(alice, pid)["img/0000.jpg"]
        saved = ok(alice.put(f"/api/items/{it['id']}", {"version": it["version"], "value": "dog"}))
        assert saved["value"] == "dog"
        assert not again.state.labelx.store.get_project(pid).dataset_labels_read
        monkeypatch.undo()
        _items(alice, pid)  # the catalog is back: the next use reads them
        assert again.state.labelx.store.get_project(pid).dataset_labels_read
    finally:
        again.state.labelx.store.close()
