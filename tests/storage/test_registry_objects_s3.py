"""StoreRegistry (and open_store) reach URLs under an s3:// objects_url with objects_s3, everything else with [s3].

A CSI dataset or workspace volume's mount has its pod's keys in ``[s3]`` and the plugin's in
``objects_s3`` (docs/csi.md "Credentials"). Here ``[s3]`` points at no server, so only a
request made with ``objects_s3`` reaches moto.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from datahub.config import Config, load_config
from datahub.errors import StorageError
from datahub.storage import StoreRegistry, open_store


def config(tmp_path: Path, s3: dict, objects_s3: dict | None, objects_url: str) -> Config:
    overrides = {"home": str(tmp_path), "s3": s3, "objects_s3": objects_s3, "objects_url": objects_url}
    return load_config(env={}, overrides=overrides)


def test_urls_under_objects_url_use_objects_s3_and_the_rest_of_the_bucket_does_not(
    tmp_path: Path, moto_endpoint
) -> None:
    moto = moto_endpoint.s3_config_overrides()["s3"]
    nowhere = {**moto, "endpoint_url": "http://127.0.0.1:9", "max_attempts": 1, "total_timeout": 5.0}
    bucket = moto_endpoint.new_bucket()
    client = moto_endpoint.client()
    for key in ("objects/blobs/sha256/ab", "objects/workspaces/w/f", "objects", "objectsx/y", "elsewhere/z"):
        client.put_object(Bucket=bucket, Key=key, Body=key.encode())
    settings = config(tmp_path, nowhere, moto, f"s3://{bucket}/objects")
    with StoreRegistry(settings) as reg:
        store, key = reg.for_url(f"s3://{bucket}/objects/blobs/sha256/ab")
        assert store.read(key) == b"objects/blobs/sha256/ab"
        assert store.url_for(key) == f"s3://{bucket}/objects/blobs/sha256/ab"  # the same object, named alike
        target = reg.store(f"s3://{bucket}/objects/workspaces/w")  # a workspace's flush target
        assert target.read("f") == b"objects/workspaces/w/f"
        assert reg.store(f"s3://{bucket}/objects").read("blobs/sha256/ab") == b"objects/blobs/sha256/ab"
        for outside in ("objects", "objectsx/y", "elsewhere/z"):  # the bucket, yet not under the prefix
            store, key = reg.for_url(f"s3://{bucket}/{outside}")
            with pytest.raises(StorageError):
                store.read(key)  # [s3]: no server there
        with pytest.raises(StorageError):
            reg.store(f"s3://{bucket}").read("objects/blobs/sha256/ab")  # a bucket root: [s3]
    with closing(open_store(f"s3://{bucket}/objects", settings)) as objects:  # e.g. import --copy's blobs
        assert objects.read("blobs/sha256/ab") == b"objects/blobs/sha256/ab"
    with closing(open_store(f"s3://{bucket}", settings)) as bucket_root, pytest.raises(StorageError):
        bucket_root.read("objects/blobs/sha256/ab")


def test_without_objects_s3_or_with_the_same_settings_every_url_uses_one_connection(
    tmp_path: Path, moto_endpoint
) -> None:
    moto = moto_endpoint.s3_config_overrides()["s3"]
    bucket = moto_endpoint.new_bucket()
    for objects_s3 in (None, moto):
        with StoreRegistry(config(tmp_path, moto, objects_s3, f"s3://{bucket}/o")) as reg:
            inside, key = reg.for_url(f"s3://{bucket}/o/blob")
            outside, _ = reg.for_url(f"s3://{bucket}/x")
            assert inside is outside and key == "o/blob"
