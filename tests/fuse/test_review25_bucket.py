"""review25: a bucket mount listed by directory is no snapshot version to ``MountSource``.

A large bucket's mount lists each directory when a reader first needs it, and commits the
whole listing, taken later, as its snapshot (docs/fuse.md, "Listing a large bucket by
directory"); its ``.datahub`` then names that snapshot version. The files it serves are the
directories' listings, each as it was when first read: an object overwritten in between is
the old object on the mount (its pages cached under the old etag) and the new one in the
snapshot's record. ``MountSource.check_version`` took the named snapshot as what the mount
shows, so a ``VersionDataset`` of the snapshot read the old object's bytes under the record
of the new one (promise 2). It refuses such a mount now, saying what to read instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from datahub.catalog import Put, Record, open_catalog
from datahub.errors import InvalidInput, ObjectChanged
from datahub.storage import StoreRegistry
from fuse_adapter.layout import snapshot_dataset_name
from tests.fuse.conftest import FuseEnv, wait_until

pytestmark = pytest.mark.fuse

OLD = {
    "d0/a.bin": b"a" * 3000,
    "d0/b.bin": b"b" * 3100,
    "d1/c.bin": b"c" * 3200,
    "d1/d.bin": b"d" * 3300,
    "d2/e.bin": b"e" * 3400,
}


def _info(mnt: Path) -> dict:
    return json.loads((mnt / ".datahub").read_text())


def test_a_snapshot_version_is_never_read_through_a_mount_listed_by_directory(env: FuseEnv) -> None:
    from datahub.torch import MountSource, VersionDataset  # here: torch's import only for this test

    with open(env.config_path, "a") as fh:  # the [cache] section is the file's last
        fh.write("bucket_list_whole_objects = 2\nbucket_warmup_opens = 2\nbucket_warmup_objects = 100\n")
    url = f"s3://{env.bucket}/data"
    new = b"A" * len(OLD["d0/a.bin"])  # the same size, other bytes
    mnt = env.mountpoint("bydir")
    catalog = open_catalog(env.config.resolved_catalog_url)
    with StoreRegistry(env.config) as stores:
        store = stores.store(url)
        for key, data in OLD.items():
            store.put(key, data)
        try:
            with env.mounted(mnt, url):
                assert (mnt / "d0" / "a.bin").read_bytes() == OLD["d0/a.bin"]  # cached, old etag
                assert _info(mnt)["listing"] == "by-directory"
                store.put("d0/a.bin", new)  # overwritten after its directory was listed
                for key in ("d1/c.bin", "d2/e.bin"):  # readers open files: the snapshot is taken
                    assert (mnt / key).read_bytes() == OLD[key]
                wait_until(lambda: _info(mnt)["versions"], timeout=60)
                [shown] = _info(mnt)["versions"]
                name, _, version = shown.partition("@")
                seq = int(version.removeprefix("v"))
                record = catalog.get_record(name, seq, "d0/a.bin")
                assert record.etag == store.stat("d0/a.bin").etag  # the snapshot has the new object
                try:
                    pinned = VersionDataset.from_catalog(
                        catalog, name, seq, MountSource(mnt), transform=lambda d, _: bytes(d)
                    )
                except InvalidInput as exc:  # refused: the mount is not that version
                    assert "by directory" in exc.message and shown in exc.message
                    return
                for i, r in enumerate(pinned.records):  # else each read is the record's, or fails
                    want = new if r.key == "d0/a.bin" else OLD[r.key]
                    try:
                        got = pinned[i]
                    except (ObjectChanged, OSError):
                        continue
                    assert got == want, f"{r.key}: not the bytes of {shown}'s record"
        finally:
            catalog.close()


def test_a_bucket_mount_that_records_no_snapshot_is_no_version(env: FuseEnv) -> None:
    """A bucket mount whose listing is not recorded as a version (here: the dataset of its
    snapshot's name is someone's own, ``foreign_snapshot``; also while it is still listing)
    serves the bucket as it is now. ``MountSource`` took its root for any version of any
    dataset, so ``s3.<bucket>.data@v1``, recorded by its owner before an object changed, read
    the changed object's bytes under v1's record of the old one."""
    from datahub.torch import MountSource, VersionDataset

    url = f"s3://{env.bucket}/data"
    name = snapshot_dataset_name(url)
    mnt = env.mountpoint("foreign")
    catalog = open_catalog(env.config.resolved_catalog_url)
    with StoreRegistry(env.config) as stores:
        store = stores.store(url)
        try:
            catalog.create_dataset(name, source=url, owner="alice")  # not one mounts make
            puts = [Put(Record(k, store.url_for(k), store.put(k, d).etag, len(d))) for k, d in OLD.items()]
            catalog.commit(name, puts, message="alice's own record of the bucket")
            new = b"A" * len(OLD["d0/a.bin"])
            store.put("d0/a.bin", new)  # changed since v1
            with env.mounted(mnt, url):
                wait_until(lambda: _info(mnt)["snapshot"].startswith("not committed"), timeout=60)
                assert (mnt / "d0" / "a.bin").read_bytes() == new  # the bucket as it is now
                try:
                    pinned = VersionDataset.from_catalog(
                        catalog, name, 1, MountSource(mnt), transform=lambda d, _: bytes(d)
                    )
                except InvalidInput as exc:  # refused: the mount shows no version
                    assert "no snapshot version" in exc.message and f"{name}@v1" in exc.message
                    return
                for i, r in enumerate(pinned.records):
                    try:
                        got = pinned[i]
                    except (ObjectChanged, OSError):
                        continue
                    assert got == OLD[r.key], f"{r.key}: not the bytes of {name}@v1's record"
        finally:
            catalog.close()
