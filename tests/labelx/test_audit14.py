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


def _names_the_item_only(env, resp, status: int, key: str, *words: str) -> None:
    """``resp`` is the error ``status``, naming ``key`` and ``words``, and nothing of where
    the object lives."""
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    for word in (key, *words):
        assert word in error["message"], (word, error)
    text = json.dumps(error)
    for where in _where(env, key):
        assert where not in text, (where, text)


def test_a_missing_object_is_named_by_its_item_not_its_url(app, env):
    admin, alice = Session(app, "admin"), Session(app, "alice")
    pid = make_project(admin)["id"]
    key = env.keys[1]
    item = _alices_item(app, pid, key)
    store, stored_key = env.stores.for_url(env.catalog.get_record("pets", 1, key).url)
    store.delete(stored_key)
    for size in ("preview", "original"):
        resp = alice.get(f"/api/items/{item}/image?size={size}")
        _names_the_item_only(env, resp, 404, key, "pets-cls")
        assert resp.json()["error"]["code"] == "object_not_found"


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
    _names_the_item_only(env, alice.get(f"/api/items/{item}/image?size=preview"), 400, key, "pets-text")


def test_a_picture_too_large_to_preview_is_named_by_its_item(app, env):
    admin, alice = Session(app, "admin"), Session(app, "alice")
    pid = make_project(admin)["id"]
    key = env.keys[3]
    item = _alices_item(app, pid, key)
    app.state.labelx.images.max_source_bytes = 100  # the JPEGs are larger
    _names_the_item_only(env, alice.get(f"/api/items/{item}/image?size=thumb"), 413, key, "original")


def test_a_coco_download_names_a_missing_picture_by_its_item(app, env):
    """COCO reads each accepted picture's size; a reviewer downloading it need not read the
    dataset either."""
    admin, rita = Session(app, "admin"), Session(app, "rita")
    schema = {"kind": "detection", "classes": ["cat", "dog"]}
    pid = make_project(admin, name="pets-det", task_size=12, annotators=[], schema=schema)["id"]
    key = env.keys[5]
    store, stored_key = env.stores.for_url(env.catalog.get_record("pets", 1, key).url)
    store.delete(stored_key)  # before anything could read it ahead
    service, user = app.state.labelx.service, app.state.labelx.store.user_by_name("admin")
    for item in app.state.labelx.store.iter_items(pid, ("todo",)):
        boxes = [{"label": "dog", "bbox": [0.25, 0.5, 0.5, 0.25]}] if item.key == key else None
        service.save(user, item.id, item.version, boxes, skip=boxes is None)
    task = app.state.labelx.store.get_item(app.state.labelx.store.item_by_key(pid, key).id).task_id
    service.submit(user, task)
    item = app.state.labelx.store.item_by_key(pid, key)
    service.review(user, item.id, item.version, True)
    _names_the_item_only(env, rita.get(f"/api/projects/{pid}/export/coco"), 404, key, "pets-det")
