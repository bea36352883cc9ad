"""A bucket volume listed from an endpoint its Secret names records no snapshot (caller71).

A bucket volume commits its listing as the next version of ``s3.<bucket>.<prefix>``, the
dataset every mount of that bucket prefix records into and that pods granted on it read
with the plugin's credentials (docs/csi.md, "Who may publish what"). A snapshot's URLs
name the bucket and key, never the endpoint. So a pod of any namespace, with a Secret naming
an S3 endpoint of its own (a bucket of the platform's bucket's name there, any keys), had the
plugin commit that endpoint's listing as the platform bucket's snapshot: names, sizes and
etags of its choosing, or an empty listing that deletes every key, under a dataset it holds
no role on. Such a volume now serves its listing and commits it nowhere (``.datahub`` says
so); its pod still reads its own endpoint's objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.errors import DatasetNotFound
from tests.csi.conftest import CsiEnv, Plugin, wait_until
from tests.csi.test_publish import pod_info
from tests.servers import MotoServer, S3Endpoint

pytestmark = pytest.mark.fuse


@pytest.fixture(scope="module")
def their_s3() -> Iterator[S3Endpoint]:
    """An S3 endpoint run by whoever wrote a pod's Secret."""
    server = MotoServer()
    try:
        yield server.endpoint
    finally:
        server.stop()


def _versions(env: CsiEnv, dataset: str) -> list[int]:
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        return [v.seq for v in catalog.log(dataset)]
    except DatasetNotFound:
        return []
    finally:
        catalog.close()


def test_a_listing_from_the_pods_own_endpoint_is_never_the_platform_buckets_snapshot(
    plugin: Plugin, csi_env: CsiEnv, their_s3: S3Endpoint
) -> None:
    ours = csi_env.endpoint.client()
    ours.put_object(Bucket=csi_env.bucket, Key="shared/real.txt", Body=b"the platform's bytes\n")
    theirs = their_s3.client()
    theirs.create_bucket(Bucket=csi_env.bucket)  # the platform's bucket's name, on their endpoint
    theirs.put_object(Bucket=csi_env.bucket, Key="shared/forged.txt", Body=b"not the platform's\n")
    snapshot = f"s3.{csi_env.bucket}.shared"
    before = _versions(csi_env, snapshot)
    secrets = {
        "s3Endpoint": their_s3.url,
        "s3AccessKeyId": their_s3.access_key,
        "s3SecretAccessKey": their_s3.secret_key,
    }
    target = csi_env.target("their-endpoint-bucket")
    context = {"bucket": csi_env.bucket, "prefix": "shared", **pod_info("team-x", "lister")}
    plugin.publish(target, context, volume_id="their-endpoint-bucket", secrets=secrets)
    try:  # the pod reads its own endpoint's listing: its business
        assert Path(target, "forged.txt").read_bytes() == b"not the platform's\n"
        wait_until(
            lambda: json.loads(Path(target, ".datahub").read_text())["state"] == "ready", 30, "the listing"
        )
        info = json.loads(Path(target, ".datahub").read_text())
    finally:
        plugin.unpublish(target, "their-endpoint-bucket")
    after = _versions(csi_env, snapshot)
    assert after == before, f"their endpoint's listing became {snapshot}@v{after[0]}"
    assert info["versions"] == [] and info["snapshot"].startswith("not committed:"), info
    assert "endpoint" in info["snapshot"], info["snapshot"]
