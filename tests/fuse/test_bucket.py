"""Direct bucket mounts: every mount lists its bucket and commits the listing as a snapshot version."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
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


def test_every_bucket_mount_lists_the_bucket_and_snapshots_it(env: FuseEnv) -> None:
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
    with StoreRegistry(env.config) as stores:
        stores.store(url).delete("top.txt")
    with env.mounted(mnt, url):  # every mount lists the bucket: a new snapshot, exactly it
        assert (mnt / "later.txt").read_bytes() == b"added after the snapshot"
        assert not (mnt / "top.txt").exists()
        wait_until(lambda: _info(mnt)["state"] == "ready", 30)
        assert _info(mnt)["versions"] == [f"{dataset}@v2"]
    with env.mounted(mnt, url, "--refresh"):  # accepted (older scripts, the CSI plugin): the same
        wait_until(lambda: _info(mnt)["state"] == "ready", 30)
        assert _info(mnt)["versions"] == [f"{dataset}@v3"]
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        records = {r.key for r in catalog.list_records(dataset, 3)}
        assert records == {k for k in objects if k not in ("bad//key", "top.txt")} | {"later.txt"}
    finally:
        catalog.close()


def test_snapshot_dataset_names() -> None:
    assert snapshot_dataset_name("s3://bench") == "s3.bench"
    assert snapshot_dataset_name("s3://bench/train/cats/") == "s3.bench.train.cats"
    assert len(snapshot_dataset_name("s3://b/" + "x" * 100)) <= 63


def test_a_bucket_mount_reads_its_own_objects_never_a_planted_snapshot(env: FuseEnv) -> None:
    """Any API token may create dataset ``s3.<bucket>.<prefix>`` and commit records into it
    naming other objects. A bucket mount reused its newest version, so ``real.txt`` read the
    planted object's bytes and ``ghost.txt`` (no such object) was listed. A mount lists the
    bucket with its own credentials. Then it committed that listing into mallory's dataset
    (snapshot13's finding): mallory read the bucket's keys, etags and sizes. It commits
    nothing into a dataset that someone owns (tests/fuse/test_bucket_snapshot_owner.py has
    the other shapes), and ``.datahub`` says why."""
    _put(env, {"planted/real.txt": b"the bucket's own bytes\n", "elsewhere/fake.txt": b"PLANTED BYTES\n"})
    url = f"s3://{env.bucket}/planted"
    dataset = snapshot_dataset_name(url)
    fake = f"s3://{env.bucket}/elsewhere/fake.txt"
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:  # what POST /v1/datasets and a commit let any token do
        catalog.create_dataset(dataset, source=url, owner="mallory")
        with StoreRegistry(env.config) as stores:
            info = stores.store(f"s3://{env.bucket}").stat("elsewhere/fake.txt")
        records = [Record("real.txt", fake, info.etag, 14), Record("ghost.txt", fake, info.etag, 14)]
        catalog.commit(dataset, [Put(r) for r in records], message="planted", author="mallory")
    finally:
        catalog.close()
    mnt = env.mountpoint("planted")
    with env.mounted(mnt, url):
        assert (mnt / "real.txt").read_bytes() == b"the bucket's own bytes\n"
        assert not (mnt / "ghost.txt").exists()
        wait_until(lambda: _info(mnt)["state"] == "ready", 30)
        info = _info(mnt)
        assert info["versions"] == [] and info["files"] == 1 and info["error"] == ""
        assert info["snapshot"].startswith(f"not committed: dataset {dataset!r}"), info["snapshot"]
        assert "owned by 'mallory'" in info["snapshot"]
        assert (mnt / "real.txt").read_bytes() == b"the bucket's own bytes\n"
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:  # mallory's dataset holds her plant and nothing of the mount's listing
        assert catalog.store.head(dataset) == 1
        assert [r.key for r in catalog.list_records(dataset, 1)] == ["ghost.txt", "real.txt"]
    finally:
        catalog.close()
