"""A node plugin (``--mode node``) that is a client of an authenticated API (docs/deployment.md, docs/kubernetes.md):
``catalog_url = http://…`` in its configuration and its token as ``DATAHUB_API_TOKEN`` in its
Secret. The plugin resolved and checked the volume with that token, then started the mount
process without it (every ``DATAHUB_*`` variable is kept from mount processes), so the mount
was refused by the server (401) and no dataset volume could be published.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.api.tokens import issue_token
from datahub.catalog import open_catalog
from tests.csi.conftest import CsiEnv, Plugin, handed_clean, node_config, serving_api
from tests.csi.test_publish import pod_info

pytestmark = pytest.mark.fuse


@pytest.fixture(scope="module")
def api_module_plugin(csi_env: CsiEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    """``datahub serve --auth`` over the environment's catalog, and a plugin whose catalog is it."""
    tmp_path = tmp_path_factory.mktemp("api")
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        token, _ = issue_token(catalog.store, "csi-node")
        catalog.update_dataset("imgs", acl={"*": "reader"})  # every token, every pod
    finally:
        catalog.close()
    try:
        with serving_api(csi_env, tmp_path, "--auth") as port:
            config_path = node_config(csi_env, tmp_path, f"http://127.0.0.1:{port}")
            plugin = Plugin(tmp_path, config_path, env={"DATAHUB_API_TOKEN": token}, mode="node")
            try:
                yield plugin.start()
            finally:
                plugin.teardown()
    finally:
        catalog = open_catalog(csi_env.config.resolved_catalog_url)
        try:
            catalog.update_dataset("imgs", acl={})
        finally:
            catalog.close()


@pytest.fixture
def api_plugin(api_module_plugin: Plugin) -> Iterator[Plugin]:
    """``api_module_plugin``, with nothing published before and after the test."""
    yield from handed_clean(api_module_plugin)


def test_a_dataset_volume_mounts_through_an_authenticated_api(api_plugin: Plugin, csi_env: CsiEnv) -> None:
    target = csi_env.target("through-api")
    api_plugin.publish(target, {"dataset": "imgs", "version": "1"}, volume_id="api")
    try:
        assert Path(target, "train", "b.bin").read_bytes() == csi_env.files[1]["train/b.bin"]
        [record] = api_plugin.state()
        with open(f"/proc/{record['pid']}/cmdline", "rb") as fh:
            assert b"dh_" not in fh.read()  # the token is never on a command line
    finally:
        api_plugin.unpublish(target, "api")


def test_a_bucket_volume_of_a_node_without_an_admin_token_still_mounts_and_makes_a_snapshot_of_nobody(
    api_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """A bucket mount creates its snapshot dataset (``s3.<bucket>.<prefix>``) through the
    remote store with the node's token. Over HTTP only global admins create such names
    (docs/api.md, "Access lists"), but the remote store makes one for any token as a mount
    does: the mount still serves the bucket, and the dataset is nobody's (before, it was the
    node token's principal's, and any token's that made it first)."""
    csi_env.endpoint.client().put_object(Bucket=csi_env.bucket, Key="node-snap/a.txt", Body=b"a\n")
    own = {"s3AccessKeyId": csi_env.endpoint.access_key, "s3SecretAccessKey": csi_env.endpoint.secret_key}
    target = csi_env.target("node-bucket")
    context = {"bucket": csi_env.bucket, "prefix": "node-snap", **pod_info("team-a", "trainer")}
    api_plugin.publish(target, context, volume_id="node-bucket", secrets=own)
    try:
        assert Path(target, "a.txt").read_bytes() == b"a\n"
    finally:
        api_plugin.unpublish(target, "node-bucket")
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        dataset = catalog.get_dataset(f"s3.{csi_env.bucket}.node-snap")
    finally:
        catalog.close()
    assert (dataset.owner, dataset.acl, dataset.source) == ("", {}, f"s3://{csi_env.bucket}/node-snap")
