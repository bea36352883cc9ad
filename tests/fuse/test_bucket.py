"""Direct bucket mounts: a snapshot version taken at mount time, reused, refreshed on request."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.storage import StoreRegistry
from fuse_adapter.layout import snapshot_dataset_name
from tests.fuse.conftest import FuseEnv, read_tree, wait_until

pytestmark = [pytest.mark.fuse, pytest.mark.slow]


def _put(env: FuseEnv, objects: dict[str, bytes]) -> None:
    with StoreRegistry(env.config) as stores:
        store = stores.store(f"s3://{env.bucket}")
        for key, data in objects.items():
            store.put(key, data)


def _info(mnt: Path) -> dict:
    return json.loads((mnt / ".datahub").read_text())


def test_bucket_mount_snapshots_reuses_and_refreshes(env: FuseEnv) -> None:
    objects = {f"train/c{i % 3}/img_{i:03d}.jpg": os.urandom(1000 + i) for i in range(30)}
    objects["bad//key"] = b"not representable as a path"
    objects["top.txt"] = b"top"
    _put(env, objects)
    url = f"s3://{env.bucket}"
    dataset = snapshot_dataset_name(url)
    mnt = env.mountpoint("bucket")
    with env.mounted(mnt, url):
        assert read_tree(mnt) == {
            k: v for k, v in objects.items() if k != "bad//key"
        }  # .datahub is not listed
        wait_until(lambda: _info(mnt)["state"] == "ready", 30)
        info = _info(mnt)
        assert info["versions"] == [f"{dataset}@v1"] and info["skipped"] == 1 and info["files"] == 31
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        records = {r.key: r.size for r in catalog.list_records(dataset, 1)}
        assert records == {k: len(v) for k, v in objects.items() if k != "bad//key"}
    finally:
        catalog.close()

    _put(env, {"later.txt": b"added after the snapshot"})
    with env.mounted(mnt, url):  # same snapshot: the new object is not there
        assert _info(mnt)["versions"] == [f"{dataset}@v1"]
        assert not (mnt / "later.txt").exists()
    with env.mounted(mnt, url, "--refresh"):
        assert (mnt / "later.txt").read_bytes() == b"added after the snapshot"
        wait_until(lambda: _info(mnt)["state"] == "ready", 30)
        assert _info(mnt)["versions"] == [f"{dataset}@v2"]


def test_snapshot_dataset_names() -> None:
    assert snapshot_dataset_name("s3://bench") == "s3.bench"
    assert snapshot_dataset_name("s3://bench/train/cats/") == "s3.bench.train.cats"
    assert len(snapshot_dataset_name("s3://b/" + "x" * 100)) <= 63
