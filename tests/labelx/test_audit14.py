"""A picture LabelX cannot show never tells an annotator where its object lives (audit14).

Items show an annotator a key and a picture, never the record's URL: under an authenticated
datahub an annotator need not read the dataset at all. audit9 kept a changed object's
message from naming the bucket or server path; a missing object, one that is no picture and
one too large to preview still answered with the storage's own message, which names the
URL, the store's root and (``file://``) the server's path of the file.
"""

from __future__ import annotations

import json

from datahub.catalog import Put, Record
from tests.labelx.conftest import Session, make_project


def _where(env, key: str) -> list[str]:
    """The ways an answer could name where ``key``'s object lives: its URL, the server's path
    of the file, and the folder of the store (every object is under it)."""
    url = env.catalog.get_record("pets", 1, key).url
    path = url.removeprefix("file://")
    return [url, path, path.rsplit("/img/", 1)[0]]


def _alices_item(app, pid: int, key: str) -> int:
    """The id of ``key``'s item, in a task of alice's (not opened: opening a task lets the
    cache fetch its pictures ahead, and these tests break them first)."""
    store = app.state.labelx.store
    item = store.item_by_key(pid, key)
    assert store.get_task(item.task_id).assignee == store.user_by_name("alice").id
    return item.id


def test_a_missing_object_is_named_by_its_item_not_its_url(app, env):
    admin, alice = Session(app, "admin"), Session(app, "alice")
    pid = make_project(admin)["id"]
    key = env.keys[1]
    item = _alices_item(app, pid, key)
    store, stored_key = env.stores.for_url(env.catalog.get_record("pets", 1, key).url)
    store.delete(stored_key)
    for size in ("preview", "original"):
        resp = alice.get(f"/api/items/{item}/image?size={size}")
        assert resp.status_code == 404, resp.text
        error = resp.json()["error"]
        assert error["code"] == "object_not_found"
        assert key in error["message"] and "pets-cls" in error["message"]
        text = json.dumps(error)
        for where in _where(env, key):
            assert where not in text, (size, where, text)


def test_an_object_that_is_no_picture_is_named_by_its_item(app, env):
    admin, alice = Session(app, "admin"), Session(app, "alice")
    key = env.keys[2]
    record = env.catalog.get_record("pets", 1, key)
    store, stored_key = env.stores.for_url(record.url)
    # a version whose record at this key holds bytes that are no picture, and a project of it
    info = store.put(stored_key, b"not a picture at all")
    env.catalog.commit("pets", [Put(Record(key, record.url, info.etag, info.size))], message="text")
    pid = make_project(admin, name="pets-text", version="2")["id"]
    item = _alices_item(app, pid, key)
    resp = alice.get(f"/api/items/{item}/image?size=preview")
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert key in error["message"]
    text = json.dumps(error)
    for where in _where(env, key):
        assert where not in text, (where, text)


def test_a_picture_too_large_to_preview_is_named_by_its_item(app, env):
    admin, alice = Session(app, "admin"), Session(app, "alice")
    pid = make_project(admin)["id"]
    key = env.keys[3]
    item = _alices_item(app, pid, key)
    app.state.labelx.images.max_source_bytes = 100  # the JPEGs are larger
    resp = alice.get(f"/api/items/{item}/image?size=thumb")
    assert resp.status_code == 413, resp.text
    error = resp.json()["error"]
    assert key in error["message"] and "original" in error["message"]
    text = json.dumps(error)
    for where in _where(env, key):
        assert where not in text, (where, text)
