"""Pre-annotation (JSON lines, torch callable, TorchScript), suggestion acceptance, downloads, CLI."""

from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest
from fastapi.testclient import TestClient

from datahub.cli.main import main
from datahub.errors import InvalidInput
from labelx.app import create_labelx_app
from tests.labelx.conftest import PASSWORD, SCHEMA, Session, add_users, make_project, ok


def _items(s: Session, pid: int) -> list[dict]:
    out = []
    for t in ok(s.get(f"/api/projects/{pid}/tasks")):
        out += ok(s.get(f"/api/tasks/{t['id']}"))["items"]
    return out


def test_jsonl_suggestions_and_acceptance_per_class(app, env):
    admin = Session(app, "admin")
    pid = make_project(admin, task_size=12, annotators=["alice"])["id"]
    lines = [
        json.dumps({"key": k, "value": "dog" if i % 2 else "cat", "score": 0.5 + i / 100})
        for i, k in enumerate(env.keys)
    ]
    bad = "\n".join([*lines[:3], '{"key": "img/0003.jpg", "value": "unicorn"}'])
    resp = admin.post(
        f"/api/projects/{pid}/suggestions?model=m1", headers={"content-type": "text/plain"}, content=bad
    )
    assert resp.status_code == 400 and "line 4" in resp.json()["error"]["message"]
    assert all(i["suggestion"] is None for i in _items(admin, pid))  # nothing imported
    r = admin.post(
        f"/api/projects/{pid}/suggestions?model=resnet@3",
        headers={"content-type": "text/plain"},
        content="\n".join(lines),
    )
    assert ok(r) == {"matched": 12}
    alice = Session(app, "alice")
    items = _items(alice, pid)
    assert items[1]["suggestion"] == {"value": "dog", "score": 0.51, "model": "resnet@3"}
    # accept 4 suggestions as they are, correct 2 (both were "cat" suggestions)
    for it in items[1:5]:
        ok(
            alice.put(
                f"/api/items/{it['id']}", {"version": it["version"], "value": it["suggestion"]["value"]}
            )
        )
    for it in (items[6], items[8]):
        ok(alice.put(f"/api/items/{it['id']}", {"version": it["version"], "value": "bird"}))
    sugg = ok(admin.get(f"/api/projects/{pid}/stats"))["suggestions"]
    assert sugg["dog"] == {"accepted": 2, "rate": 1.0}
    assert sugg["cat"] == {"accepted": 2, "corrected": 2, "rate": 0.5}


def test_torch_callable_preannotation_by_cli(app, env, tmp_path, capsys):
    store = app.state.labelx.store
    project = app.state.labelx.service.create_project(
        store.user_by_name("admin"), name="by-model", dataset="pets", schema=SCHEMA, task_size=12
    )
    home = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}"]
    rc = main(
        [
            *home,
            "--json",
            "labelx",
            "preannotate",
            "by-model",
            "--model",
            "tests.labelx.models:by_color",
            "--model-version",
            "color@1",
            "--side",
            "32",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["suggestions"] == 12
    got = {i.key: i.suggestion for i in store.iter_items(project.id)}
    assert got["img/0000.jpg"]["value"] == "cat"  # red
    assert got["img/0001.jpg"]["value"] == "dog"  # green
    assert got["img/0002.jpg"]["value"] == "bird"  # blue
    assert got["img/0000.jpg"]["model"] == "color@1" and 0 < got["img/0000.jpg"]["score"] <= 1


def test_torchscript_preannotation(app, env, tmp_path):
    import torch

    from datahub.web.images import ImageSource
    from labelx import preannotate
    from tests.labelx.models import ByColor

    path = tmp_path / "model.pt"
    torch.jit.script(ByColor()).save(str(path))
    store, service = app.state.labelx.store, app.state.labelx.service
    project = service.create_project(
        store.user_by_name("admin"), name="ts", dataset="pets", schema=SCHEMA, prefix="img/000"
    )
    images = ImageSource(tmp_path / "previews", cache=env.cache)
    n = preannotate.run_model(
        store, project, service.schema(project), images, str(path), side=32, batch_size=4
    )
    assert n == 10
    assert store.item_by_key(project.id, "img/0002.jpg").suggestion["value"] == "bird"  # blue
    assert store.item_by_key(project.id, "img/0001.jpg").suggestion["model"] == str(path)
    with pytest.raises(InvalidInput, match="not found"):
        preannotate.run_model(store, project, service.schema(project), images, str(tmp_path / "missing.pt"))


def _accept_all(app, admin: Session, pid: int, values: dict[int, object]) -> None:
    for i, it in enumerate(_items(admin, pid)):  # label the given items, skip the rest
        body = {"value": values[i]} if i in values else {"skip": True}
        ok(admin.put(f"/api/items/{it['id']}", {"version": it["version"], **body}))
    for t in ok(admin.get(f"/api/projects/{pid}/tasks")):
        ok(admin.post(f"/api/tasks/{t['id']}/submit"))
    for q in ok(admin.get(f"/api/projects/{pid}/review")):
        ok(admin.post(f"/api/items/{q['id']}/review", {"version": q["version"], "accept": True}))


def test_csv_export_for_classification(app, env):
    admin = Session(app, "admin")
    pid = make_project(
        admin,
        task_size=12,
        annotators=[],
        schema={"kind": "classification", "multi": True, "classes": ["cat", "dog"]},
    )["id"]
    _accept_all(app, admin, pid, {1: ["dog", "cat"], 2: ["dog"]})
    rows = list(csv.reader(io.StringIO(admin.get(f"/api/projects/{pid}/export/csv").text)))
    assert rows == [["key", "class"], ["img/0001.jpg", "cat;dog"], ["img/0002.jpg", "dog"]]
    assert admin.get(f"/api/projects/{pid}/export/coco").status_code == 409


def test_coco_and_yolo_export_for_detection(app, env):
    admin = Session(app, "admin")
    schema = {"kind": "detection", "classes": ["cat", "dog"]}
    pid = make_project(admin, task_size=12, annotators=[], schema=schema)["id"]
    boxes = [{"label": "dog", "bbox": [0.25, 0.5, 0.5, 0.25]}, {"label": "cat", "bbox": [0, 0, 1, 1]}]
    _accept_all(app, admin, pid, {3: boxes})
    coco = ok(admin.get(f"/api/projects/{pid}/export/coco"))
    assert coco["images"] == [{"id": 1, "file_name": "img/0003.jpg", "width": 320, "height": 240}]
    assert [a["bbox"] for a in coco["annotations"]] == [[80.0, 120.0, 160.0, 60.0], [0.0, 0.0, 320.0, 240.0]]
    assert [c["name"] for c in coco["categories"]] == ["cat", "dog"]
    assert coco["annotations"][0]["category_id"] == 2
    zf = zipfile.ZipFile(io.BytesIO(admin.get(f"/api/projects/{pid}/export/yolo").content))
    assert zf.read("classes.txt") == b"cat\ndog\n"
    assert zf.read("labels/img/0003.txt").decode().splitlines() == [
        "1 0.500000 0.625000 0.500000 0.250000",
        "0 0.500000 0.500000 1.000000 1.000000",
    ]
    bad = {"label": "dog", "bbox": [0.9, 0.9, 0.5, 0.5]}
    item = _items(admin, pid)[4]
    assert (
        admin.put(f"/api/items/{item['id']}", {"version": item["version"], "value": [bad]}).status_code == 400
    )


def test_cli_users_projects_commit_export(app, env, tmp_path, capsys, monkeypatch):
    cat = ["--home", env.config.home, "--catalog", f"sqlite:///{tmp_path / 'catalog.db'}", "--json"]
    monkeypatch.setenv("LABELX_PASSWORD", PASSWORD)
    assert main([*cat, "labelx", "create-user", "zoe", "--role", "admin"]) == 0
    assert main([*cat, "labelx", "create-user", "zoe"]) == 4  # already exists
    capsys.readouterr()
    assert (
        main(
            [
                *cat,
                "labelx",
                "create-project",
                "cli-p",
                "--dataset",
                "pets",
                "--classes",
                "cat,dog",
                "--user",
                "zoe",
                "--task-size",
                "4",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["items"] == 12
    assert (
        main(
            [*cat, "labelx", "create-project", "x", "--dataset", "pets", "--classes", "a", "--user", "alice"]
        )
        == 6
    )
    pred = tmp_path / "p.jsonl"
    pred.write_text(json.dumps({"key": "img/0005.jpg", "value": "dog", "score": 0.9, "model": "m"}) + "\n")
    assert main([*cat, "labelx", "preannotate", "cli-p", "--predictions", str(pred)]) == 0
    assert json.loads(capsys.readouterr().out)["suggestions"] == 1
    store = app.state.labelx.store
    project = store.project_by_name("cli-p")
    zoe = store.user_by_name("zoe")
    item = store.item_by_key(project.id, "img/0005.jpg")
    store.save_value(item.id, zoe.id, item.version, "dog", "annotated")
    store.submit_task(item.task_id)
    store.review(item.id, zoe.id, item.version + 2, True, "")
    assert main([*cat, "labelx", "commit", "cli-p", "--user", "zoe"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["dataset"], out["version"], out["modified"]) == ("pets", 2, 1)
    assert env.catalog.get_record("pets", 2, "img/0005.jpg").labels == {"class": "dog"}
    target = tmp_path / "labels.csv"
    assert main([*cat, "labelx", "export", "cli-p", "--format", "csv", "-o", str(target)]) == 0
    assert target.read_text().splitlines() == ["key,class", "img/0005.jpg,dog"]
    assert main([*cat, "labelx", "projects"]) == 0
    assert "cli-p" in capsys.readouterr().out
    assert main([*cat, "labelx", "create-token", "zoe"]) == 0
    assert json.loads(capsys.readouterr().out)["token"].startswith("lx_")


def test_mounted_beside_the_datahub_api_under_labelx(env):
    from datahub.api import create_app

    parent = create_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    lx = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores, cache=env.cache)
    add_users(lx, alice="annotator")
    parent.mount("/labelx", lx)
    client = TestClient(parent, base_url="http://127.0.0.1")
    assert client.get("/openapi.json").json()["info"]["title"] == "datahub"  # the API still answers
    page = client.get("/labelx/login").text
    assert 'href="/labelx/static/app.css"' in page and 'action="/labelx/login"' in page
    assert client.get("/labelx/static/annotate.js").status_code == 200
    token = client.cookies.get(lx.state.labelx.auth.login_csrf_cookie)
    resp = client.post(
        "/labelx/login", data={"name": "alice", "password": PASSWORD, "csrf": token}, follow_redirects=False
    )
    assert resp.headers["location"] == "/labelx/"
    assert "path=/labelx" in resp.headers["set-cookie"].lower()  # the session stays with LabelX
    home = client.get("/labelx/").text
    assert '"base": "/labelx"' in home
    assert client.get("/labelx/api/me").json()["name"] == "alice"
    lx.state.labelx.store.close()
