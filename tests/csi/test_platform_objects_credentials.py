"""The platform's objects bucket is the plugin's: a volume's own keys need nothing there.

A volume's Secret sets ``[s3]`` of its mount. Records under the plugin's ``objects_url``
(content-addressed blobs, pack shards) and a workspace's flush target
(``<objects_url>/workspaces/<name>/``) were reached with that tenant key too, so an operator
had to give every tenant key READ on every dataset's objects and, for workspaces, WRITE on
the whole platform bucket: any tenant could overwrite any dataset's blobs (sharedcreds11's
finding). Now a dataset or workspace volume, whose publish passed the catalog's access check,
reaches URLs under ``objects_url`` with the plugin's keys (``objects_s3`` of its config), and
everything else with its own. A bucket volume names its bucket itself, the catalog authorised
nothing: it never gets the plugin's keys, even for the platform bucket.

Here S3 is a moto server with IAM authorization on: the tenant's key may do anything except
in the platform bucket, and the plugin's ``objects_s3`` key anything except in the tenant's
own bucket, so a request signed with the wrong key is refused (403 in the request log).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.config import load_config
from datahub.ingest.blobs import blob_key
from datahub.storage import StoreRegistry
from fuse_adapter.daemon import DEAD_DAEMON_ERRNOS
from tests.csi import test_bucket_cache_access
from tests.csi.conftest import CsiEnv, Plugin, make_env, wait_until
from tests.csi.test_bucket_cache_access import IamMoto, read
from tests.csi.test_publish import pod_info
from tests.writeback.flushed import workspace_object_key

pytestmark = pytest.mark.fuse

plugin = test_bucket_cache_access.plugin  # its module-scoped plugin fixture, on this module's env
PLATFORM = "platform-objects"  # objects_url = s3://platform-objects/objects
TENANT = "tenant-data"  # the tenant's own bucket, where it imported a record from
FILES = {  # record key -> (root of the object, bytes)
    "a.bin": (f"s3://{PLATFORM}/objects", os.urandom(300_000)),
    "b.bin": (f"s3://{PLATFORM}/objects", os.urandom(5 * 1024 * 1024 + 7)),
    "late.bin": (f"s3://{PLATFORM}/objects", os.urandom(70_000)),  # read only after a remount
    "own.bin": (f"s3://{TENANT}/imports", os.urandom(90_000)),
}


class PlatformMoto(IamMoto):
    """A tenant refused the platform bucket; the plugin's objects key refused the tenant's."""

    def more_users(self) -> None:
        def arns(bucket: str) -> tuple[str, str]:
            return f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"

        self.tenant = self.user("tenant", ["s3:*"], denied=arns(PLATFORM))
        self.objects_key = self.user("objects", ["s3:*"], denied=arns(TENANT))


@pytest.fixture(scope="module")
def iam() -> Iterator[PlatformMoto]:
    moto = PlatformMoto()
    try:
        yield moto
    finally:
        moto.server.stop()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, iam: PlatformMoto) -> CsiEnv:
    env = make_env(tmp_path_factory.mktemp("csi-platform"), iam.endpoint())
    for bucket in (PLATFORM, TENANT):
        env.endpoint.client().create_bucket(Bucket=bucket)
    text = re.sub(
        r"(?m)^objects_url = .*$", f'objects_url = "s3://{PLATFORM}/objects"', env.config_path.read_text()
    )
    key, secret = iam.objects_key["s3AccessKeyId"], iam.objects_key["s3SecretAccessKey"]
    text += (  # the plugin's keys for its objects bucket: not its [s3] (which may read everything)
        f'\n[objects_s3]\nendpoint_url = "{iam.url}"\naccess_key_id = "{key}"\n'
        f'secret_access_key = "{secret}"\nregion = "us-east-1"\nmax_attempts = 2\n'
    )
    env.config_path.write_text(text)
    env.config = load_config(env.config_path, env={})
    changes = []
    with StoreRegistry(load_config(env.config_path, env={}, overrides={"objects_s3": None})) as stores:
        for name, (root, data) in FILES.items():  # uploaded with the plugin's [s3], which may do all
            blob = blob_key(hashlib.sha256(data).hexdigest()) if PLATFORM in root else name
            store = stores.store(root)
            info = store.put(blob, data)
            changes.append(Put(Record(name, store.url_for(blob), info.etag, len(data))))
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("platform-set")
        catalog.commit("platform-set", changes, message="records in the platform's objects bucket")
    finally:
        catalog.close()
    return env


def log_size(iam: PlatformMoto) -> int:
    return iam.server.log_size()


def statuses(iam: PlatformMoto, bucket: str, since: int) -> list[str]:
    """The statuses of every request the server answered for ``bucket`` after byte ``since``."""
    return [str(status) for _, _, status in iam.server.answered(bucket, since=since)]


def dataset_volume() -> dict[str, str]:
    return {"dataset": "platform-set", "prefetch": "false", **pod_info("team-a", "trainer")}


def test_a_dataset_volume_reads_platform_objects_with_the_plugins_keys_and_its_own_with_its_own(
    plugin: Plugin, env: CsiEnv, iam: PlatformMoto
) -> None:
    target, since = env.target("dataset-platform"), log_size(iam)
    plugin.publish(target, dataset_volume(), volume_id="ds", secrets=iam.tenant)
    try:
        for name in ("a.bin", "b.bin", "own.bin"):
            assert read(os.path.join(target, name)) == FILES[name][1], name
    finally:
        plugin.unpublish(target, "ds")
    platform, tenant = statuses(iam, PLATFORM, since), statuses(iam, TENANT, since)
    assert platform and "403" not in platform, "the platform bucket was asked with the tenant's key"
    assert tenant and "403" not in tenant, "the tenant's bucket was asked with the plugin's objects key"


def test_a_workspace_volume_flushes_and_commits_into_the_platform_bucket_with_the_plugins_keys(
    plugin: Plugin, env: CsiEnv, iam: PlatformMoto
) -> None:
    target, since = env.target("ws-platform"), log_size(iam)
    context = {"workspace": "platform-ws", "commitTo": "platform-out", **pod_info("team-a", "trainer")}
    data = os.urandom(200_000)
    plugin.publish(target, context, volume_id="ws", secrets=iam.tenant)
    try:
        Path(target, "out.bin").write_bytes(data)
    finally:
        plugin.unpublish(target, "ws")  # flushes, then commits into platform-out
    client = env.endpoint.client()
    flushed = client.get_object(
        Bucket=PLATFORM, Key=workspace_object_key(client, PLATFORM, "platform-ws", "out.bin")
    )
    assert flushed["Body"].read() == data
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        (record,) = list(catalog.list_records("platform-out", catalog.resolve("platform-out", None).seq))
    finally:
        catalog.close()
    assert record.url.startswith(f"s3://{PLATFORM}/objects/blobs/sha256/"), record.url
    assert client.get_object(Bucket=PLATFORM, Key=record.url.split("/", 3)[3])["Body"].read() == data
    platform = statuses(iam, PLATFORM, since)
    assert platform and "403" not in platform, "the platform bucket was asked with the tenant's key"


def test_a_bucket_volume_of_the_platform_bucket_never_gets_the_plugins_keys(
    plugin: Plugin, env: CsiEnv, iam: PlatformMoto
) -> None:
    """The catalog authorised nothing: the pod's key, which may list but not read, is all it has."""
    target, since = env.target("bucket-platform"), log_size(iam)
    context = {
        "bucket": PLATFORM, "prefix": "objects/blobs/sha256", "prefetch": "false",
        "csi.storage.k8s.io/ephemeral": "true", **pod_info("team-b", "trainer"),
    }  # fmt: skip
    plugin.publish(target, context, volume_id="bucket", secrets=iam.lister)
    try:
        (record,) = [p for p in plugin.state() if p["target_path"] == target]
        assert "objects_s3" not in Path(record["volume_dir"], "datahub.toml").read_text()
        blobs = [
            blob_key(hashlib.sha256(data).hexdigest()).removeprefix("blobs/sha256/")
            for root, data in FILES.values()
            if PLATFORM in root
        ]
        for name in blobs:
            assert os.path.isfile(os.path.join(target, name)), name  # the pod's key may list
            for _ in range(2):  # again: a refusal is not remembered as a grant
                with pytest.raises(OSError) as err:
                    read(os.path.join(target, name))
                assert err.value.errno in (errno.EACCES, errno.EIO), err.value
    finally:
        plugin.unpublish(target, "bucket")
    assert "403" in statuses(iam, PLATFORM, since), "S3 never refused the pod's key: it was not asked"


def test_a_remount_gives_a_config_written_before_the_fix_the_plugins_objects_keys(
    plugin: Plugin, env: CsiEnv, iam: PlatformMoto
) -> None:
    """A volume published by an older plugin has no ``objects_s3`` in its config file: when
    the supervisor starts its mount process again, the file gets the plugin's, and an object
    of the platform bucket never read before is read with them."""
    target, since = env.target("ds-renewed"), log_size(iam)
    plugin.publish(target, dataset_volume(), volume_id="ds-renewed", secrets=iam.tenant)
    try:
        (record,) = [p for p in plugin.state() if p["target_path"] == target]
        config = Path(record["volume_dir"], "datahub.toml")
        text = config.read_text()
        old = re.sub(r"(?ms)^\[objects_s3\]\n.*?(?=^\[|\Z)", "", text)
        assert old != text and "objects_s3" not in old
        config.write_text(old)
        os.kill(record["pid"], signal.SIGKILL)

        def serving() -> bool:
            with contextlib.suppress(OSError):
                return read(os.path.join(target, "own.bin")) == FILES["own.bin"][1]
            return False

        wait_until(serving, 90, "the remounted dataset volume serves its files")
        assert "[objects_s3]" in config.read_text() and oct(config.stat().st_mode & 0o777) == "0o600"
        try:
            assert read(os.path.join(target, "late.bin")) == FILES["late.bin"][1]
        except OSError as exc:
            assert exc.errno not in DEAD_DAEMON_ERRNOS, exc
            raise
        platform = statuses(iam, PLATFORM, since)
        assert platform and "403" not in platform, "the platform bucket was asked with the tenant's key"
    finally:
        plugin.unpublish(target, "ds-renewed")
