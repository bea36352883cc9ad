"""gaps26: ``MountSource`` over a bind mount of a directory of a bucket mount.

A bucket mount names the snapshot version it shows only in the ``.datahub`` at its root. A
bind of one of its directories (``mount --bind MNT/train X``, as a pod's volume of part of a
bucket would be) shows neither: ``MountSource`` took it for a plain directory, checked no
version, and read record ``train/x`` as ``X/train/x``, the bucket's ``train/train/x``: another
object's bytes under the record (here a decoy planted there), or none. It is refused now,
saying why and what to give instead; the bucket mount's root, and a bind of that root, still
read the snapshot's records. A bind of a version mount's dataset directory (above its
versions: record ``v1/x`` read version v1's ``x``) is refused the same way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.errors import InvalidInput
from datahub.storage import StoreRegistry
from tests.fuse.conftest import FuseEnv, snapshot_version, upload_dataset
from tests.fuse.test_gaps26_umount import bind_mount

pytestmark = pytest.mark.fuse

OBJECTS = {
    "train/a.bin": b"a" * 300,
    "train/b.bin": b"b" * 310,
    "train/train/a.bin": b"decoy: the key train/train/a.bin",
    "val/c.bin": b"c" * 320,
}


def _bytes(data: bytes | memoryview, _labels: object) -> bytes:
    return bytes(data)


def test_a_bind_of_a_bucket_mounts_directory_never_reads_another_key(env: FuseEnv, tmp_path: Path) -> None:
    from datahub.torch import MountSource, VersionDataset

    url = f"s3://{env.bucket}/data"
    with StoreRegistry(env.config) as stores:
        store = stores.store(url)
        for key, data in OBJECTS.items():
            store.put(key, data)
    mnt = env.mountpoint("bucket")
    below, whole = tmp_path / "train-volume", tmp_path / "whole-volume"
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        with env.mounted(mnt, url):
            name, seq = snapshot_version(mnt)
            with bind_mount(mnt / "train", below), bind_mount(mnt, whole):
                assert (below / "train" / "a.bin").read_bytes() == OBJECTS["train/train/a.bin"]
                for prefix in ("train/", ""):
                    with pytest.raises(InvalidInput) as refused:
                        VersionDataset.from_catalog(
                            catalog, name, seq, MountSource(below), prefix=prefix, transform=_bytes
                        )
                    said = refused.value.message
                    assert f"{below} is in a bind of the directory /train" in said, said
                    assert "CacheSource" in said and refused.value.details["version"] == seq
                # the mount's root, and a bind of it, show the snapshot: every record reads its own bytes
                for root in (mnt, whole):
                    ds = VersionDataset.from_catalog(catalog, name, seq, MountSource(root), transform=_bytes)
                    assert {r.key: ds[i] for i, r in enumerate(ds.records)} == OBJECTS
    finally:
        catalog.close()


def test_a_bind_of_a_version_mounts_dataset_directory_is_refused(env: FuseEnv, tmp_path: Path) -> None:
    from datahub.torch import MountSource, VersionDataset

    # a key that looks like a version's directory: read through MNT/<dataset> it was v1's "x.txt"
    upload_dataset(env, "odd", {"v1/x.txt": b"the key v1/x.txt", "x.txt": b"the key x.txt"})
    mnt = env.mountpoint("versions")
    bound = tmp_path / "dataset-dir"
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        with env.mounted(mnt, "odd@v1"), bind_mount(mnt / "odd", bound):
            assert (bound / "v1" / "x.txt").read_bytes() == b"the key x.txt"
            with pytest.raises(InvalidInput) as refused:
                VersionDataset.from_catalog(catalog, "odd", 1, MountSource(bound), transform=_bytes)
            said = refused.value.message
            assert "above its versions' directories" in said and str(bound / "v1") in said, said
            ds = VersionDataset.from_catalog(catalog, "odd", 1, MountSource(bound / "v1"), transform=_bytes)
            assert {r.key: ds[i] for i, r in enumerate(ds.records)} == {
                "v1/x.txt": b"the key v1/x.txt",
                "x.txt": b"the key x.txt",
            }
    finally:
        catalog.close()
