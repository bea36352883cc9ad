"""Downloads of keys whose names collide in a format's layout (leftovers15).

YOLO pairs an image with ``labels/<dir>/<stem>.txt``: ``img/0003.jpg`` and ``img/0003.png``
both map to ``labels/img/0003.txt``. The zip held that name twice, and an unzip kept one
image's boxes for both (wrong output). The export is now refused, naming both keys; COCO
(each image by its whole key) and CSV (one row per key) keep both, and are checked to.
"""

from __future__ import annotations

import csv
import io
import zipfile

from PIL import Image

from datahub.catalog import Put, Record
from datahub.storage import open_store
from labelx.export import COLLISIONS_SHOWN
from tests.labelx.conftest import Session, make_project, ok

DOG = [{"label": "dog", "bbox": [0.25, 0.5, 0.5, 0.25]}]
CAT = [{"label": "cat", "bbox": [0.0, 0.0, 1.0, 1.0]}]


def _add_png(env, tmp_path, key: str) -> None:
    """Commit a PNG under ``key`` into ``pets`` (the fixture's version 1 holds JPEGs only)."""
    objects = open_store((tmp_path / "objects").as_uri(), env.config)
    data = io.BytesIO()
    Image.new("RGB", (320, 240), "navy").save(data, "PNG")
    info = objects.put(key, data.getvalue())
    env.catalog.commit("pets", [Put(Record(key, objects.url_for(key), info.etag, info.size))], message="png")


def _label(admin: Session, pid: int, values: dict[str, object]) -> None:
    """Label the items of the given keys, submit and accept them."""
    for t in ok(admin.get(f"/api/projects/{pid}/tasks")):
        for it in ok(admin.get(f"/api/tasks/{t['id']}"))["items"]:
            body = {"value": values[it["key"]]} if it["key"] in values else {"skip": True}
            ok(admin.put(f"/api/items/{it['id']}", {"version": it["version"], **body}))
        ok(admin.post(f"/api/tasks/{t['id']}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))


def test_yolo_refuses_two_images_of_one_stem_and_coco_keeps_both(app, env, tmp_path):
    _add_png(env, tmp_path, "img/0003.png")
    admin = Session(app, "admin")
    schema = {"kind": "detection", "classes": ["cat", "dog"]}
    pid = make_project(admin, task_size=13, annotators=[], schema=schema)["id"]
    _label(admin, pid, {"img/0003.jpg": DOG, "img/0003.png": CAT, "img/0004.jpg": CAT})
    resp = admin.get(f"/api/projects/{pid}/export/yolo")
    assert resp.status_code == 409, resp.status_code
    message = resp.json()["error"]["message"]
    assert "img/0003.jpg and img/0003.png -> labels/img/0003.txt" in message
    assert "img/0004" not in message and "COCO" in message
    coco = ok(admin.get(f"/api/projects/{pid}/export/coco"))
    assert sorted(i["file_name"] for i in coco["images"]) == ["img/0003.jpg", "img/0003.png", "img/0004.jpg"]
    assert len(coco["annotations"]) == 3


def test_yolo_without_collisions_writes_each_label_file_once(app, env):
    admin = Session(app, "admin")
    schema = {"kind": "detection", "classes": ["cat", "dog"]}
    pid = make_project(admin, task_size=12, annotators=[], schema=schema)["id"]
    _label(admin, pid, {"img/0003.jpg": DOG, "img/0004.jpg": CAT})
    zf = zipfile.ZipFile(io.BytesIO(admin.get(f"/api/projects/{pid}/export/yolo").content))
    assert zf.namelist() == ["classes.txt", "labels/img/0003.txt", "labels/img/0004.txt"]
    assert zf.read("labels/img/0004.txt") == b"0 0.500000 0.500000 1.000000 1.000000\n"


def test_csv_keeps_two_keys_of_one_stem(app, env, tmp_path):
    _add_png(env, tmp_path, "img/0003.png")
    admin = Session(app, "admin")
    schema = {"kind": "classification", "classes": ["cat", "dog"]}
    pid = make_project(admin, task_size=13, annotators=[], schema=schema)["id"]
    _label(admin, pid, {"img/0003.jpg": "dog", "img/0003.png": "cat"})
    rows = list(csv.reader(io.StringIO(admin.get(f"/api/projects/{pid}/export/csv").text)))
    assert rows == [["key", "class"], ["img/0003.jpg", "dog"], ["img/0003.png", "cat"]]


def test_yolo_refusal_names_a_few_pairs_and_counts_all(app, env, tmp_path):
    for i in range(COLLISIONS_SHOWN + 2):
        _add_png(env, tmp_path, f"img/{i:04d}.png")
    admin = Session(app, "admin")
    schema = {"kind": "detection", "classes": ["cat", "dog"]}
    pid = make_project(admin, task_size=30, annotators=[], schema=schema)["id"]
    keys = [f"img/{i:04d}.{ext}" for i in range(COLLISIONS_SHOWN + 2) for ext in ("jpg", "png")]
    _label(admin, pid, dict.fromkeys(keys, CAT))
    message = admin.get(f"/api/projects/{pid}/export/yolo").json()["error"]["message"]
    assert f"{COLLISIONS_SHOWN + 2} labelled image(s)" in message and "(and 2 more)" in message
    assert message.count(" -> labels/img/") == COLLISIONS_SHOWN
