"""Boxes at the edges of what a label may hold: a width or height that rounds to nothing, a
corner a hair outside the image.

``LabelSchema._check_box`` checked ``w > 0`` and ``h > 0`` and then rounded the numbers to 6
places, so a box 4e-7 of the image wide was saved, accepted and exported with width 0: COCO
``"bbox": [.., .., 0.0, ..], "area": 0.0``, YOLO ``w 0.000000``, a degenerate box that
torchvision's detection models refuse at training (``All bounding boxes should have positive
height and width``). And a corner within the 1e-6 tolerance outside the image (x = -4e-7) was
kept as ``-0.0``. Now the box is checked as it is stored: a box that rounds to no width or no
height is refused (400, naming it, nothing saved), and the tolerated sliver outside the image
is cut off, so every stored box lies in 0..1 with w and h > 0."""

from __future__ import annotations

import io
import json
import math
import zipfile

import pytest

from datahub.errors import InvalidInput
from labelx.schema import parse_schema
from tests.labelx.conftest import Env, Session, make_project, ok

SCHEMA = {"kind": "detection", "classes": ["cat", "dog"]}


def test_a_box_that_rounds_to_no_width_is_refused_where_it_is_sent(app, env: Env) -> None:
    admin = Session(app, "admin")
    pid = make_project(admin, name="boxes", schema=SCHEMA, annotators=["admin"])["id"]
    task = ok(admin.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    item = ok(admin.get(f"/api/tasks/{task}"))["items"][0]
    for bbox in ([0.5, 0.5, 4e-7, 0.2], [0.5, 0.5, 0.2, 4e-7]):
        resp = admin.put(
            f"/api/items/{item['id']}",
            {"version": item["version"], "value": [{"label": "cat", "bbox": bbox}]},
        )
        assert resp.status_code == 400, (bbox, resp.text)
        assert str(bbox) in resp.json()["error"]["message"]
    assert app.state.labelx.store.get_item(item["id"]).value is None  # nothing saved
    line = json.dumps({"key": env.keys[0], "value": [{"label": "cat", "bbox": [0.1, 0.1, 0.3, 3e-7]}]})
    resp = admin.post(f"/api/projects/{pid}/suggestions", content=line)
    assert resp.status_code == 400 and "predictions line 1" in resp.json()["error"]["message"], resp.text


def test_every_exported_box_has_an_area_and_lies_in_the_image(app, env: Env) -> None:
    admin = Session(app, "admin")
    pid = make_project(admin, name="boxes", schema=SCHEMA, annotators=["admin"])["id"]
    task = ok(admin.get(f"/api/projects/{pid}/tasks"))[0]["id"]
    items = ok(admin.get(f"/api/tasks/{task}"))["items"]
    boxes = [
        [-4e-7, -4e-7, 0.5, 0.5],  # a hair outside the top-left corner
        [0.5, 0.5, 0.5000004, 0.5000004],  # a hair outside the bottom-right corner
        [0.25, 0.25, 1.4e-6, 0.25],  # thin, but a width once rounded
    ]
    value = [{"label": "cat", "bbox": b} for b in boxes]
    saved = ok(admin.put(f"/api/items/{items[0]['id']}", {"version": items[0]["version"], "value": value}))
    for box in saved["value"]:
        x, y, w, h = box["bbox"]
        assert x >= 0 and y >= 0 and w > 0 and h > 0 and x + w <= 1 and y + h <= 1, box
        assert not any(math.copysign(1, v) < 0 for v in box["bbox"]), box  # no -0.0
    for it in items[1:]:
        ok(admin.put(f"/api/items/{it['id']}", {"version": it["version"], "value": None, "skip": True}))
    ok(admin.post(f"/api/tasks/{task}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))

    coco = ok(admin.get(f"/api/projects/{pid}/export/coco"))
    (image,) = coco["images"]
    for ann in coco["annotations"]:
        x, y, w, h = ann["bbox"]
        assert ann["area"] > 0 and w > 0 and h > 0, ann
        assert x >= 0 and y >= 0 and x + w <= image["width"] and y + h <= image["height"], ann
    yolo = admin.get(f"/api/projects/{pid}/export/yolo")
    with zipfile.ZipFile(io.BytesIO(yolo.content)) as zf:
        (name,) = [n for n in zf.namelist() if n.startswith("labels/")]
        for line in zf.read(name).decode().splitlines():
            _, cx, cy, w, h = map(float, line.split())
            assert w > 0 and h > 0 and cx - w / 2 >= 0 and cx + w / 2 <= 1 + 1e-6, line


@pytest.mark.parametrize("bbox", [[0.0, 0.0, 1e-7, 1e-7], [0.999999, 0.0, 4e-7, 0.5]])
def test_the_schema_refuses_a_box_with_no_area_once_stored(bbox) -> None:
    with pytest.raises(InvalidInput, match="w and h"):
        parse_schema(SCHEMA).check_value([{"label": "dog", "bbox": bbox}])
