"""LabelX at 10^4 items: create a project, export it (commit + CSV), and autosave latency.

Goal (issue 7): a 10,000-item project is created in <= 30 s and exported in <= 30 s.
Baselines measured in the same run, on the same catalog:
- create: streaming the same records out of the catalog (the floor any project creation pays);
- export: committing the same 10,000 Patch changes straight to the catalog (the floor of export).

    .venv/bin/python bench/labelx/bench_project.py [--items 10000]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.catalog import Patch, Put, Record, open_catalog
from datahub.config import load_config
from labelx.auth import hash_password
from labelx.export import commit_labels, export_csv
from labelx.service import LabelService
from labelx.store import LabelStore

CLASSES = ["cat", "dog", "bird", "fish"]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run(tmp: Path) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--saves", type=int, default=300)
    n = ap.parse_args().items
    saves = ap.parse_args().saves
    config = load_config(env={}, overrides={"home": str(tmp / "var")})
    catalog = open_catalog(f"sqlite:///{tmp / 'catalog.db'}")

    def records():
        for i in range(n):
            url = f"s3://bucket/train/{i:06d}.jpg"
            yield Record(f"train/{i:06d}.jpg", url, f"etag{i}", 50_000 + i, meta={"i": i})

    catalog.create_dataset("big")
    _, t_import = timed(lambda: catalog.commit("big", (Put(r) for r in records()), message="import"))
    # an identical twin for the export baseline, so both commits patch the same v1 state
    catalog.create_dataset("big-twin")
    catalog.commit("big-twin", (Put(r) for r in records()), message="import")

    # baseline 1: stream the records (what any project creation must at least read)
    _, t_list = timed(lambda: sum(1 for _ in catalog.list_records("big", 1)))

    store = LabelStore(tmp / "var" / "labelx.db")
    admin = store.create_user("admin", "admin", hash_password("benchmark-pass"))
    annotators = [store.create_user(f"a{i}", "annotator", "x").id for i in range(4)]
    service = LabelService(store, catalog)
    schema = {"kind": "classification", "classes": CLASSES}
    project, t_create = timed(
        lambda: service.create_project(
            admin, name="big-project", dataset="big", schema=schema, task_size=100,
            annotators=[f"a{i}" for i in range(4)],
        )
    )  # fmt: skip
    assert project.item_count == n

    # autosave latency through the store (what each keypress costs server-side)
    items = store.task_items(store.list_tasks(project.id)[0]["id"])
    lat = []
    for k in range(min(saves, len(items))):
        it = items[k]
        t0 = time.perf_counter()
        service.save(store.get_user(annotators[0]), it.id, it.version, CLASSES[k % 4])
        lat.append(time.perf_counter() - t0)

    # mark every item annotated + accepted (setup, not measured)
    db = store._conn()
    db.execute("BEGIN")
    db.execute(
        "UPDATE items SET status='accepted', value=json_quote(CASE id % 4 WHEN 0 THEN 'cat' WHEN 1 THEN 'dog' "
        "WHEN 2 THEN 'bird' ELSE 'fish' END), annotated_by=?, annotated_at=? WHERE project_id=?",
        (annotators[1], time.time(), project.id),
    )
    db.execute("COMMIT")

    # baseline 2: the same N Patch changes committed straight to the catalog (on the twin)
    def direct() -> object:
        return catalog.commit(
            "big-twin",
            (Patch(f"train/{i:06d}.jpg", labels={"class": CLASSES[i % 4]}) for i in range(n)),
            message="direct",
        )

    _, t_direct = timed(direct)
    version, t_export = timed(lambda: commit_labels(service, admin, project.id, message="bench"))
    assert version.modified == n, version
    spool, t_csv = timed(lambda: export_csv(service, project))
    csv_bytes = len(spool.read())
    _, t_stats = timed(lambda: service.stats(admin, project.id))

    # the same through HTTP (FastAPI app, bearer token): a second project over the same version
    from fastapi.testclient import TestClient

    from labelx.app import create_labelx_app
    from labelx.auth import Auth

    store.close()
    app = create_labelx_app(config, catalog=catalog, stores=None, cache=None)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        token = Auth(app.state.labelx.store).new_token(admin, "bench")
        auth = {"Authorization": f"Bearer {token}"}
        body = {"name": "big-http", "dataset": "big", "version": 1, "schema": schema, "task_size": 100}
        resp, t_http_create = timed(lambda: client.post("/api/projects", json=body, headers=auth))
        assert resp.status_code == 201, resp.text
        pid = resp.json()["id"]
        hdb = app.state.labelx.store._conn()
        hdb.execute("BEGIN")
        hdb.execute("UPDATE items SET status='accepted', value='\"fish\"' WHERE project_id=?", (pid,))
        hdb.execute("COMMIT")
        resp, t_http_commit = timed(lambda: client.post(f"/api/projects/{pid}/commit", json={}, headers=auth))
        assert resp.status_code == 200 and resp.json()["modified"] > 0, resp.text
        resp, t_http_csv = timed(lambda: client.get(f"/api/projects/{pid}/export/csv", headers=auth))
        assert resp.status_code == 200

    figures = {
        "machine": f"{platform.system()} {platform.release()}, {platform.machine()}",
        "items": n,
        "catalog_import_s": round(t_import, 3),
        "baseline_list_records_s": round(t_list, 3),
        "create_project_s": round(t_create, 3),
        "create_vs_list_ratio": round(t_create / t_list, 2),
        "baseline_direct_catalog_commit_s": round(t_direct, 3),
        "export_commit_s": round(t_export, 3),
        "export_vs_direct_ratio": round(t_export / t_direct, 2),
        "export_csv_s": round(t_csv, 3),
        "csv_bytes": csv_bytes,
        "dashboard_stats_s": round(t_stats, 3),
        "autosave_p50_ms": round(1000 * statistics.median(lat), 2),
        "autosave_p95_ms": round(1000 * statistics.quantiles(lat, n=20)[18], 2),
        "http_create_project_s": round(t_http_create, 3),
        "http_commit_s": round(t_http_commit, 3),
        "http_export_csv_s": round(t_http_csv, 3),
        "goal_create_le_30s": max(t_create, t_http_create) <= 30,
        "goal_export_le_30s": max(t_export + t_csv, t_http_commit + t_http_csv) <= 30,
    }
    print(json.dumps(figures, indent=2))
    catalog.close()


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="labelx-bench-"))
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left behind in /tmp


if __name__ == "__main__":
    main()
