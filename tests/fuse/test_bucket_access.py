"""``fuse_adapter.bucket_access``: one check per object per mount, shared by concurrent readers,
skipped for what the mount's own origin read, never remembered when it fails; and two users'
``datahub mount MNT s3://...`` sharing one cache directory, on moto with IAM authorization.

The CSI case (a pod that may list but not read is refused another pod's cached pages) is
tests/csi/test_bucket_cache_access.py.
"""

from __future__ import annotations

import errno
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from datahub.config import load_config
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef
from fuse_adapter.bucket_access import ObjectAccess
from tests.csi.test_bucket_cache_access import IamMoto, iam  # noqa: F401 - the module's IAM moto fixture
from tests.fuse.conftest import FuseEnv, make_env
from tests.servers import S3Endpoint


@pytest.fixture
def stores(tmp_path: Path, moto_endpoint: S3Endpoint):
    config = load_config(
        env={}, overrides={"home": str(tmp_path / "var"), **moto_endpoint.s3_config_overrides()}
    )
    with StoreRegistry(config) as registry:
        yield registry


def put(stores: StoreRegistry, endpoint: S3Endpoint, key: str, data: bytes) -> ObjectRef:
    store = stores.store(f"s3://{endpoint.new_bucket('access')}")
    info = store.put(key, data)
    return ObjectRef(store.url_for(key), info.etag, len(data))


def test_concurrent_first_reads_of_an_object_share_one_check(stores, moto_endpoint: S3Endpoint) -> None:
    ref = put(stores, moto_endpoint, "a.bin", b"a" * 5000)
    access = ObjectAccess(stores)
    assert not access.allowed(ref)
    start = threading.Barrier(16)

    def first_read() -> None:
        start.wait()
        access.check(ref)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda _: first_read(), range(16)))
    assert access.allowed(ref)
    access.check(ref)
    assert access.stats() == {"access_allowed": 1, "access_checks": 1, "access_denied": 0}


def test_an_object_the_origin_read_for_this_mount_needs_no_check(stores, moto_endpoint: S3Endpoint) -> None:
    ref = put(stores, moto_endpoint, "b.bin", b"b" * 5000)
    access = ObjectAccess(stores)
    access.granted(ref.url, ref.etag)
    access.check(ref)
    assert access.allowed(ref) and access.stats()["access_checks"] == 0
    other = ObjectRef(ref.url, "0" * 32, ref.size)  # another version of it: not granted
    assert not access.allowed(other)


def test_a_failed_check_is_not_remembered(stores, moto_endpoint: S3Endpoint) -> None:
    ref = put(stores, moto_endpoint, "c.bin", b"c" * 5000)
    stale = ObjectRef(ref.url, "0" * 32, ref.size)  # the object was replaced behind the snapshot
    access = ObjectAccess(stores)
    for _ in range(2):
        with pytest.raises(ObjectChanged):
            access.check(stale)
    assert not access.allowed(stale)
    assert access.stats() == {"access_allowed": 0, "access_checks": 2, "access_denied": 2}
    assert access.allowed(ObjectRef(ref.url, ref.etag, 0))  # an empty object has no bytes to keep


@pytest.mark.fuse
def test_a_users_bucket_mount_is_not_served_what_another_users_mount_cached(
    tmp_path: Path,
    iam: IamMoto,  # noqa: F811 - the fixture imported above
) -> None:
    """``datahub mount MNT s3://bucket/prefix`` by two users whose configurations share one
    home (one cache directory): the second user's credentials may list the bucket, not read it."""
    first = make_env(tmp_path, iam.endpoint())
    first.endpoint.client().put_object(Bucket=first.bucket, Key="data/x.bin", Body=b"x" * 90_000)
    text = first.config_path.read_text()
    for name, value in iam.admin.items():
        text = text.replace(value, iam.lister[name])
    second_path = tmp_path / "lister.toml"
    second_path.write_text(text)
    second = FuseEnv(tmp_path, second_path, load_config(second_path, env={}), first.bucket, first.endpoint)
    url = f"s3://{first.bucket}/data"
    mnt = first.mountpoint("first")
    with first.mounted(mnt, url, "--no-prefetch"):
        assert (mnt / "x.bin").read_bytes() == b"x" * 90_000
    mnt = second.mountpoint("second")
    with second.mounted(mnt, url, "--no-prefetch"):
        assert [p.name for p in mnt.iterdir()] == ["x.bin"]  # listed with the second user's keys
        with pytest.raises(OSError) as err:
            (mnt / "x.bin").read_bytes()
        assert err.value.errno in (errno.EACCES, errno.EIO), err.value
