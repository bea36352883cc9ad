"""Datasets, versions, records (cursor pagination, prefix, filter), export, diff, commits, tags."""

from __future__ import annotations

import json

from tests.api.conftest import PETS_V1, Api

# a local-mode app answers only requests addressed to this machine (datahub/api/local_mode.py)
LOCAL = "http://127.0.0.1"


def test_create_and_describe_dataset(api: Api):
    r = api.post("/v1/datasets", json={"name": "birds", "description": "b", "source": "s3://x/birds"})
    assert r.status_code == 201
    body = api.get("/v1/datasets/birds").json()
    assert {k: body[k] for k in ("name", "description", "source", "owner", "head")} == {
        "name": "birds",
        "description": "b",
        "source": "s3://x/birds",
        "owner": "root",
        "head": 0,
    }
    assert api.post("/v1/datasets", json={"name": "birds"}).status_code == 409


def test_version_by_number_tag_and_latest(api: Api):
    assert api.get("/v1/datasets/pets/versions/1").json()["record_count"] == 25
    assert api.get("/v1/datasets/pets/versions/v1").json()["seq"] == 1
    assert api.get("/v1/datasets/pets/versions/latest").json()["seq"] == 1
    api.put("/v1/datasets/pets/tags/golden", json={"ref": "latest"})
    assert api.get("/v1/datasets/pets/versions/golden").json()["tags"] == ["golden"]
    versions = api.get("/v1/datasets/pets/versions").json()
    assert [v["seq"] for v in versions] == [1] and versions[0]["author"] == "owner"


def test_cursor_pagination_walks_every_record_once_in_key_order(api: Api):
    keys, cursor, pages = [], None, 0
    while True:
        params = {"limit": 7, **({"cursor": cursor} if cursor else {})}
        body = api.get("/v1/datasets/pets/versions/1/records", params=params).json()
        keys += [r["key"] for r in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert keys == sorted(r.key for r in PETS_V1) and pages == 4


def test_exact_page_boundary_has_no_dangling_cursor(api: Api):
    body = api.get("/v1/datasets/pets/versions/1/records", params={"limit": 25}).json()
    assert len(body["items"]) == 25 and body["next_cursor"] is None


def test_prefix_and_filter(api: Api):
    body = api.get("/v1/datasets/pets/versions/1/records", params={"prefix": "img/01"}).json()
    assert [r["key"] for r in body["items"]] == [f"img/{i:03d}.jpg" for i in range(10, 20)]
    body = api.get("/v1/datasets/pets/versions/1/records", params={"filter": "labels.class=cat"}).json()
    assert len(body["items"]) == 12 and all(r["labels"] == {"class": "cat"} for r in body["items"])


def test_get_one_record_with_slashes_in_its_key(api: Api):
    body = api.get("/v1/datasets/pets/versions/latest/records/img/003.jpg").json()
    assert body == {
        "key": "img/003.jpg",
        "url": "file:///data/img/003.jpg",
        "etag": "etag-img/003.jpg",
        "size": 10,
        "checksum": "",
        "meta": {"split": "train"},
        "labels": {"class": "cat"},
    }


def test_export_streams_the_whole_version_as_ndjson(api: Api):
    r = api.get("/v1/datasets/pets/versions/1/export")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    assert r.headers["x-datahub-version"] == "1"
    rows = [json.loads(line) for line in r.text.splitlines()]
    assert [row["key"] for row in rows] == [rec.key for rec in PETS_V1]


def test_commit_then_diff_json_and_ndjson(api: Api):
    changes = [
        {"op": "delete", "key": "img/000.jpg"},
        {"op": "patch", "key": "img/001.jpg", "labels": {"class": "lion"}},
        {"op": "put", "record": {"key": "new/x.jpg", "url": "s3://b/x.jpg", "etag": "e", "size": 3}},
    ]
    r = api.post("/v1/datasets/pets/commits", json={"base": 1, "message": "m", "changes": changes})
    assert r.status_code == 201, r.text
    v2 = r.json()
    assert (v2["seq"], v2["parent"], v2["author"], v2["added"], v2["removed"], v2["modified"]) == (
        2,
        1,
        "root",
        1,
        1,
        1,
    )
    body = api.get("/v1/datasets/pets/diff", params={"from": 1, "to": 2, "limit": 2}).json()
    assert [(e["kind"], e["key"]) for e in body["items"]] == [
        ("removed", "img/000.jpg"),
        ("modified", "img/001.jpg"),
    ]
    rest = api.get(
        "/v1/datasets/pets/diff", params={"from": 1, "to": 2, "cursor": body["next_cursor"]}
    ).json()
    assert [(e["kind"], e["key"]) for e in rest["items"]] == [("added", "new/x.jpg")] and rest[
        "next_cursor"
    ] is None
    lines = api.get("/v1/datasets/pets/diff", params={"from": 1, "format": "ndjson"}).text.splitlines()
    entries = [json.loads(line) for line in lines]
    assert [e["key"] for e in entries] == ["img/000.jpg", "img/001.jpg", "new/x.jpg"]
    assert entries[1]["old"]["labels"] == {"class": "cat"} and entries[1]["new"]["labels"] == {
        "class": "lion"
    }
    # reverse direction and from the empty state
    back = api.get("/v1/datasets/pets/diff", params={"from": 2, "to": 1}).json()["items"]
    assert back[0]["kind"] == "added" and back[0]["key"] == "img/000.jpg"
    assert len(api.get("/v1/datasets/pets/diff", params={"from": 0, "to": 1}).json()["items"]) == 25


def test_commit_id_makes_a_retry_idempotent(api: Api):
    body = {"commit_id": "job-42", "changes": [{"op": "delete", "key": "img/000.jpg"}]}
    first = api.post("/v1/datasets/pets/commits", json=body).json()
    again = api.post("/v1/datasets/pets/commits", json=body).json()
    assert first["seq"] == again["seq"] == 2
    assert api.catalog.store.head("pets") == 2


def test_tags_move_and_delete(api: Api):
    api.post("/v1/datasets/pets/commits", json={"changes": [{"op": "delete", "key": "img/000.jpg"}]})
    assert api.put("/v1/datasets/pets/tags/golden", json={"ref": 1}).json()["seq"] == 1
    assert api.put("/v1/datasets/pets/tags/golden", json={"ref": "latest"}).json()["seq"] == 2
    assert api.delete("/v1/datasets/pets/tags/golden").status_code == 204
    r = api.get("/v1/datasets/pets/versions/golden")
    assert r.status_code == 404 and "golden" in r.json()["error"]["message"]


def test_derive_commits_the_filtered_records(api: Api):
    r = api.post(
        "/v1/datasets/pets/versions/1/derive", json={"where": "labels.class=cat", "to_dataset": "cats"}
    )
    assert r.status_code == 201, r.text
    assert r.json()["dataset"] == "cats" and r.json()["record_count"] == 12
    assert r.json()["lineage"]["derived_from"] == "pets@v1"


def test_metrics_count_requests_by_route_template(api: Api):
    api.get("/v1/datasets/pets/versions/1/records/img/001.jpg")
    api.get("/v1/datasets/nope")
    text = api.get("/metrics").text  # the api fixture serves with --auth: a token (sec24)
    assert (
        'datahub_http_requests_total{method="GET",route="/v1/datasets/{name}/versions/{ref}/records/{key:path}",'
        'status="200"} 1' in text
    )
    assert 'datahub_http_requests_total{method="GET",route="/v1/datasets/{name}",status="404"} 1' in text
    assert "# TYPE datahub_http_requests_total counter" in text


def test_metrics_include_the_attached_cache(config):
    from datahub.api import create_app
    from datahub.cache import open_cache
    from datahub.storage import StoreRegistry, drop_memory_space, open_store
    from tests.api.conftest import TestClient

    config.cache.ram_bytes = 8 * 1024**2
    store = open_store("memory://api-metrics", config)
    info = store.put("a.bin", b"z" * 1000)
    with StoreRegistry(config) as stores:
        cache = open_cache(config, stores)
        try:
            assert cache.read(store.ref("a.bin")) == b"z" * 1000
            with TestClient(create_app(config, stores=stores, cache=cache), base_url=LOCAL) as client:
                text = client.get("/metrics").text
        finally:
            cache.close()
            drop_memory_space("api-metrics")
    assert "datahub_http_requests_total" in text
    assert f"datahub_origin_bytes_total {info.size}" in text


def test_metrics_show_the_warm_up_of_each_mount_sharing_the_home(config):
    """A mount is a process of its own: /metrics reads its warm-up from its stats snapshot."""
    import os

    from datahub.api import create_app
    from datahub.cache.stats import remove_snapshot, stats_dir, write_snapshot
    from tests.api.conftest import TestClient

    warmup = {
        "mount": "/mnt/raw", "source": "s3://b/p/", "mode": "auto", "state": "running", "reason": "pattern",
        "scope": "s3://b/p/train/", "passes": 1, "objects_total": 9, "bytes_total": 90,
        "objects_warmed": 3, "bytes_warmed": 30, "objects_left": 4, "bytes_left": 40,
        "objects_skipped": 0, "bytes_skipped": 0,
    }  # fmt: skip
    write_snapshot(stats_dir(config), {"pid": os.getpid(), "tiers": [], "warmups": [warmup]})
    try:
        with TestClient(create_app(config), base_url=LOCAL) as client:
            text = client.get("/metrics").text
    finally:
        remove_snapshot(stats_dir(config))
    assert 'datahub_warmup_running{mount="/mnt/raw",mode="auto",state="running",reason="pattern"} 1' in text
    assert 'datahub_warmup_objects_warmed{mount="/mnt/raw"} 3' in text
    assert 'datahub_warmup_bytes_left{mount="/mnt/raw"} 40' in text
