"""The node's shared tier is the plugin's: reached with its S3 settings, never a volume's own.

A volume's Secret gives the S3 credentials its own objects are read (a workspace's: written)
with. The shared tier (``cache.shared_url``) holds pages every node serves to every pod, keyed
by (URL, etag, page): opened with a pod's credentials, it failed for a pod whose key may not
write the shared bucket, and an operator who let tenants' keys write it let any tenant plant
pages all nodes serve (sharedcreds11's finding). Here S3 is a moto server with its IAM
authorization on: the tenant's key may do anything in the data bucket and nothing in the
shared tier's bucket, so any request of the shared tier signed with it is refused (403 in the
server's request log).
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from fuse_adapter.daemon import DEAD_DAEMON_ERRNOS
from tests.csi.conftest import CsiEnv, Plugin, make_env, wait_until
from tests.csi.test_bucket_cache_access import IamMoto, plugin, read  # noqa: F401 - plugin: its fixture, on this module's env
from tests.csi.test_publish import pod_info
from tests.writeback.flushed import workspace_object_key

pytestmark = pytest.mark.fuse

SHARED_BUCKET = "node-cache"
DATA = {"team/a.bin": os.urandom(300_000), "team/b.bin": os.urandom(5 * 1024 * 1024 + 3)}


class SharedMoto(IamMoto):
    """The module's moto server, with a tenant allowed everything but the shared tier's bucket."""

    def more_users(self) -> None:
        shared = f"arn:aws:s3:::{SHARED_BUCKET}"
        self.tenant = self.user("tenant", ["s3:*"], denied=(shared, f"{shared}/*"))


@pytest.fixture(scope="module")
def iam() -> Iterator[SharedMoto]:
    moto = SharedMoto()
    try:
        yield moto
    finally:
        moto.server.stop()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, iam: SharedMoto) -> CsiEnv:
    env = make_env(tmp_path_factory.mktemp("csi-shared"), iam.endpoint())
    client = env.endpoint.client()
    client.create_bucket(Bucket=SHARED_BUCKET)
    for key, data in DATA.items():
        client.put_object(Bucket=env.bucket, Key=key, Body=data)
    with open(env.config_path, "a") as fh:  # the config ends in its [cache] section
        fh.write(f'shared_url = "s3://{SHARED_BUCKET}/node-pool"\ndisk_bytes = 0\n')
    return env


def shared_requests(iam: SharedMoto) -> list[str]:
    """The statuses of every request the server answered for the shared tier's bucket."""
    return [str(status) for _, _, status in iam.server.answered(SHARED_BUCKET)]


def shared_objects(env: CsiEnv, prefix: str) -> list[str]:
    listing = env.endpoint.client().list_objects_v2(Bucket=SHARED_BUCKET, Prefix=f"node-pool/{prefix}")
    return [o["Key"] for o in listing.get("Contents", [])]


def test_a_bucket_volume_fills_the_shared_tier_with_the_plugins_credentials_not_its_own(
    plugin: Plugin,  # noqa: F811 - the fixture imported above
    env: CsiEnv,
    iam: SharedMoto,
) -> None:
    target = env.target("bucket-shared")
    context = {
        "bucket": env.bucket, "prefix": "team", "prefetch": "false",
        "csi.storage.k8s.io/ephemeral": "true", **pod_info("team-a", "trainer"),
    }  # fmt: skip
    plugin.publish(target, context, volume_id="bucket-shared", secrets=iam.tenant)
    try:
        for key, data in DATA.items():  # the tenant's key reads its own bucket
            assert read(os.path.join(target, key.removeprefix("team/"))) == data
    finally:
        plugin.unpublish(target, "bucket-shared")  # the mount's close uploads queued pages
    assert shared_objects(env, "pages/"), "no page reached the shared tier"
    statuses = shared_requests(iam)
    assert statuses and "403" not in statuses, "the shared tier was asked with the tenant's key"


def test_a_workspace_volume_keeps_its_chunks_in_the_shared_tier_with_the_plugins_credentials(
    plugin: Plugin,  # noqa: F811 - the fixture imported above
    env: CsiEnv,
    iam: SharedMoto,
) -> None:
    """A workspace's acknowledged chunks are the shared tier's too; the flush writes the
    volume's files with the tenant's key (the data bucket is its own)."""
    target = env.target("ws-shared")
    context = {"workspace": "shared-creds", **pod_info("team-a", "trainer")}
    data = os.urandom(200_000)
    plugin.publish(target, context, volume_id="ws-shared", secrets=iam.tenant)
    try:
        with open(os.path.join(target, "out.bin"), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())  # acknowledged: durable in the shared tier
        assert shared_objects(env, "writeback/shared-creds/"), "no chunk reached the shared tier"
        statuses = shared_requests(iam)
        assert statuses and "403" not in statuses, "the shared tier was asked with the tenant's key"
    finally:
        plugin.unpublish(target, "ws-shared")
    client = env.endpoint.client()
    flushed = client.get_object(
        Bucket=env.bucket, Key=workspace_object_key(client, env.bucket, "shared-creds", "out.bin")
    )
    assert flushed["Body"].read() == data


def test_a_remount_gives_a_config_written_before_the_fix_the_plugins_shared_tier_settings(
    plugin: Plugin,  # noqa: F811 - the fixture imported above
    env: CsiEnv,
    iam: SharedMoto,
) -> None:
    """A volume published by an older plugin has no ``cache.shared_s3`` in its config file:
    when the supervisor starts its mount process again, the file gets the plugin's (without,
    the workspace's shared tier is asked with the tenant's key and the remount fails)."""
    target = env.target("ws-renewed")
    context = {"workspace": "renewed", **pod_info("team-a", "trainer")}
    plugin.publish(target, context, volume_id="ws-renewed", secrets=iam.tenant)
    try:
        Path(target, "kept.bin").write_bytes(b"acknowledged")
        (record,) = [p for p in plugin.state() if p["target_path"] == target]
        config = Path(record["volume_dir"], "datahub.toml")
        lines = config.read_text().splitlines(keepends=True)
        config.write_text("".join(line for line in lines if not line.startswith("shared_s3 =")))
        os.kill(record["pid"], signal.SIGKILL)

        def serving() -> bool:
            try:
                return Path(target, "kept.bin").read_bytes() == b"acknowledged"
            except OSError as exc:
                assert exc.errno in DEAD_DAEMON_ERRNOS | {errno.ENOENT}, exc
                return False

        wait_until(serving, 90, "the remounted workspace serves its acknowledged file")
        assert "shared_s3 =" in config.read_text() and oct(config.stat().st_mode & 0o777) == "0o600"
        statuses = shared_requests(iam)
        assert statuses and "403" not in statuses, "the shared tier was asked with the tenant's key"
    finally:
        plugin.unpublish(target, "ws-renewed")
