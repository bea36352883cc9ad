"""Keys with ``?``, ``#`` and ``%`` stay readable end to end; reserved names never enter a version.

Issue 12 item 9: such keys were imported, snapshotted and committed as raw URLs that every
reader refused ("invalid storage URL ... no query or fragment allowed"): versions nobody
could read. Each test goes through the real import / commit and a real mount.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from urllib.parse import quote

import fsspec
import httpx
import pytest

from datahub.api import create_app
from datahub.api.server import ApiServer
from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.storage import StoreRegistry
from tests.fuse.conftest import REPO, FuseEnv, read_tree, wait_until

pytestmark = pytest.mark.fuse

ODD = {"q?x=1": b"query bytes\n", "hash#frag": b"fragment bytes\n", "pct%41": b"percent bytes\n"}


def _datahub(env: FuseEnv, *args: str) -> str:
    """The ``datahub`` CLI itself (``env.cli`` runs the mount daemon's, which only mounts)."""
    cmd = [sys.executable, "-m", "datahub.cli.main", "--config", str(env.config_path), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, f"datahub {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


def _records(env: FuseEnv, dataset: str) -> dict:
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        return {r.key: r for r in catalog.list_records(dataset, None)}
    finally:
        catalog.close()


def test_imported_odd_keys_read_byte_exact_everywhere(env: FuseEnv) -> None:
    client = env.endpoint.client()
    for key, data in ODD.items():
        client.put_object(Bucket=env.bucket, Key=f"odd/{key}", Body=data)

    _datahub(env, "import", f"s3://{env.bucket}/odd", "--to", "odd")  # by reference
    records = _records(env, "odd")
    assert sorted(records) == sorted(ODD)
    assert records["pct%41"].url == f"s3://{env.bucket}/odd/pct%2541"  # docs/storage.md
    # the HTTP API (a real server: starlette's TestClient decodes paths twice) answers each
    # record, the key percent-encoded in the request path as HTTP wants it
    env.config.api.port, env.config.api.local_mode = 0, True
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        with ApiServer(create_app(env.config, catalog=catalog), env.config) as server:
            for key, record in records.items():
                got = httpx.get(f"{server.url}/v1/datasets/odd/versions/1/records/{quote(key, safe='')}")
                assert got.status_code == 200, got.text
                assert (got.json()["key"], got.json()["url"]) == (key, record.url)
    finally:
        catalog.close()
    # the CLI shows every record; the Python API reads each one's bytes through its URL
    exported = [json.loads(line) for line in _datahub(env, "export", "odd").splitlines()]
    assert sorted(r["key"] for r in exported) == sorted(ODD)
    with StoreRegistry(env.config) as stores:
        for key, record in records.items():
            store, object_key = stores.for_url(record.url)
            assert store.read(object_key, etag=record.etag) == ODD[key]
    # datahub:// (fsspec)
    fs = fsspec.filesystem("datahub", config=env.config, skip_instance_cache=True)
    try:
        for key, data in ODD.items():
            assert fs.cat_file(f"odd@v1/{key}") == data
    finally:
        fs.close()
    # a real read-only mount of the version
    mnt = env.mountpoint("ro")
    with env.mounted(mnt, "odd@v1"):
        assert read_tree(mnt / "odd" / "v1") == ODD


def test_bucket_mount_reads_odd_keys_and_hides_reserved_names(env: FuseEnv) -> None:
    client = env.endpoint.client()
    objects = {**ODD, ".datahub-hint-x": b"reserved", "d/.datahub-hint-1-0-1-5": b"reserved too"}
    for key, data in objects.items():
        client.put_object(Bucket=env.bucket, Key=f"snap/{key}", Body=data)
    mnt = env.mountpoint("bucket")
    with env.mounted(mnt, f"s3://{env.bucket}/snap"):
        assert read_tree(mnt) == ODD  # neither listed nor readable: lookups of such names are hints
        assert not (mnt / ".datahub-hint-x").exists()
        wait_until(lambda: json.loads((mnt / ".datahub").read_text())["state"] != "listing", 30)
        info = json.loads((mnt / ".datahub").read_text())
        assert info["state"] == "ready" and info["skipped"] == 2
    with env.mounted(mnt, f"s3://{env.bucket}/snap"):  # the snapshot version, read back
        assert read_tree(mnt) == ODD


def test_workspace_files_with_odd_names_commit_and_read_back(env: FuseEnv) -> None:
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("outputs")
    finally:
        catalog.close()
    files = {"q?x=1": b"job output one\n", "hash#frag": b"job output two\n", "run/pct%41": b"three\n"}
    ws = env.mountpoint("ws")
    with env.mounted(ws, "--workspace", "ws", "--commit-to", "outputs"):
        (ws / "run").mkdir()
        for name, data in files.items():
            (ws / name).write_bytes(data)
        for bad in (".datahub-hint-x", "run/.datahub-hint-1-0-1-5"):  # reserved: never an entry
            with pytest.raises(OSError) as exc:
                (ws / bad).write_bytes(b"x")
            assert exc.value.errno == errno.EINVAL
        with pytest.raises(OSError) as exc:
            (ws / ".datahub-hint-dir").mkdir()
        assert exc.value.errno == errno.EINVAL
        with pytest.raises(OSError) as exc:
            os.rename(ws / "q?x=1", ws / ".datahub-hint-y")
        assert exc.value.errno == errno.EINVAL
    assert sorted(_records(env, "outputs")) == sorted(files)
    ro = env.mountpoint("ro")
    with env.mounted(ro, "outputs@v1"):
        assert read_tree(ro / "outputs" / "v1") == files


def test_versions_committed_with_raw_urls_before_the_rule_become_readable(env: FuseEnv) -> None:
    """Catalogs hold raw ``s3://b/q?x=1`` URLs from before keys were escaped: they now read."""
    client = env.endpoint.client()
    changes = []
    for key, data in ODD.items():
        etag = client.put_object(Bucket=env.bucket, Key=f"old/{key}", Body=data)["ETag"].strip('"')
        changes.append(Put(Record(key, f"s3://{env.bucket}/old/{key}", etag, len(data))))  # raw, as before
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("legacy")
        catalog.commit("legacy", changes, message="stored before the escaping rule")
    finally:
        catalog.close()
    fs = fsspec.filesystem("datahub", config=env.config, skip_instance_cache=True)
    try:
        assert {k: fs.cat_file(f"legacy@v1/{k}") for k in ODD} == ODD
    finally:
        fs.close()
    mnt = env.mountpoint("legacy")
    with env.mounted(mnt, "legacy@v1"):
        assert read_tree(mnt / "legacy" / "v1") == ODD
