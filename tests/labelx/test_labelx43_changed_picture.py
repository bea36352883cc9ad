"""A commit never puts a label onto a record whose picture changed since it was labelled.

Before labelx43, ``commit_labels`` compared only the labels at the dataset's head: a record
whose bytes were replaced in a newer version (same key, another etag) took the label an
annotator gave the OLD picture, and the new version said that label for a picture nobody in
the project saw. Now the commit is refused (409, nothing written), naming the record and the
versions, whatever ``overwrite`` says (it is for labels, not pictures); a commit into a new
dataset, which holds the pictures as labelled, still works, and so does the rest of the
project once those items are taken out (rejected)."""

from __future__ import annotations

from datahub.catalog import Patch, Put, Record
from tests.labelx.conftest import Session, jpeg, make_project, ok


def _label_all_and_accept(admin: Session, alice: Session, pid: int, value: str) -> None:
    tid = ok(alice.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    for it in ok(alice.get(f"/api/tasks/{tid}"))["items"]:
        ok(alice.put(f"/api/items/{it['id']}", {"version": it["version"], "value": value}))
    ok(alice.post(f"/api/tasks/{tid}/submit"))
    for it in ok(admin.get(f"/api/tasks/{tid}"))["items"]:
        ok(admin.post(f"/api/items/{it['id']}/review", {"version": it["version"], "accept": True}))


def _replace_picture(env, key: str, color: str) -> int:
    """A new version of pets whose record ``key`` points at other bytes (its labels kept)."""
    old = env.catalog.get_record("pets", env.catalog.store.head("pets"), key)
    store, path = env.stores.for_url(old.url)
    new_key = path.replace(".jpg", "-new.jpg")
    info = store.put(new_key, jpeg(color))
    rec = Record(
        key, store.url_for(new_key), info.etag, info.size, meta=dict(old.meta), labels=dict(old.labels)
    )
    return env.catalog.commit("pets", [Put(rec)], message="new picture").seq


def test_a_label_is_never_committed_onto_a_picture_changed_since(app, env):
    admin, alice = Session(app, "admin"), Session(app, "alice")
    pid = make_project(admin, task_size=12, annotators=["alice"])["id"]
    changed = env.keys[3]
    head = _replace_picture(env, changed, "magenta")  # pets@v2: img/0003.jpg is another picture
    _label_all_and_accept(admin, alice, pid, "dog")  # labelled from pets@v1's picture

    for body in ({}, {"overwrite": True}):
        refused = admin.post(f"/api/projects/{pid}/commit", body)
        assert refused.status_code == 409, refused.text
        message = refused.json()["error"]["message"]
        assert changed in message and f"pets@v{head}" in message and "pets@v1" in message, message
        assert "picture" in message and "--to-dataset" in message, message
        assert env.catalog.store.head("pets") == head  # nothing written
    assert "class" not in env.catalog.get_record("pets", head, changed).labels

    # the pictures as labelled: a new dataset of the project's records holds every label
    made = ok(admin.post(f"/api/projects/{pid}/commit", {"to_dataset": "pets-as-labelled"}))
    rec = env.catalog.get_record("pets-as-labelled", made["seq"], changed)
    assert rec.etag == env.catalog.get_record("pets", 1, changed).etag and rec.labels["class"] == "dog"

    # taken out of the project (rejected), the item no longer holds up its other labels
    item = app.state.labelx.store.item_by_key(pid, changed)
    ok(
        admin.post(
            f"/api/items/{item.id}/review",
            {"version": item.version, "accept": False, "comment": "new picture"},
        )
    )
    done = ok(admin.post(f"/api/projects/{pid}/commit", {}))
    labels = {r.key: r.labels.get("class") for r in env.catalog.list_records("pets", done["seq"])}
    assert labels[changed] is None and labels[env.keys[4]] == "dog"


def test_a_picture_changed_before_the_projects_own_commit_is_still_seen(app, env):
    """The label check returns early when the head is the project's own commit; the picture
    check may not: a picture replaced before that commit (its item not accepted yet then)."""
    admin, alice = Session(app, "admin"), Session(app, "alice")
    pid = make_project(admin, task_size=6, annotators=["alice"])["id"]  # two tasks of 6
    late = env.keys[8]  # in the second task
    _label_all_and_accept(admin, alice, pid, "dog")  # the first task
    _replace_picture(env, late, "magenta")
    first = ok(admin.post(f"/api/projects/{pid}/commit", {}))  # its items' pictures are unchanged
    tid = ok(alice.get(f"/api/projects/{pid}/tasks"))[1]["id"]
    for it in ok(alice.get(f"/api/tasks/{tid}"))["items"]:
        ok(alice.put(f"/api/items/{it['id']}", {"version": it["version"], "value": "bird"}))
    ok(alice.post(f"/api/tasks/{tid}/submit"))
    for it in ok(admin.get(f"/api/tasks/{tid}"))["items"]:
        ok(admin.post(f"/api/items/{it['id']}/review", {"version": it["version"], "accept": True}))
    refused = admin.post(f"/api/projects/{pid}/commit", {})
    assert refused.status_code == 409 and late in refused.json()["error"]["message"], refused.text
    assert env.catalog.store.head("pets") == first["seq"]


def test_same_picture_at_a_new_version_commits(app, env):
    """Only the picture counts: a version that changed a record's labels or meta, not its
    bytes, does not refuse the commit (the label rule is the one for that)."""
    admin, alice = Session(app, "admin"), Session(app, "alice")
    pid = make_project(admin, task_size=12, annotators=["alice"])["id"]
    env.catalog.commit("pets", [Patch(env.keys[3], meta={"seen": True})], message="meta only")
    _label_all_and_accept(admin, alice, pid, "dog")
    done = ok(admin.post(f"/api/projects/{pid}/commit", {}))
    assert env.catalog.get_record("pets", done["seq"], env.keys[3]).labels["class"] == "dog"
