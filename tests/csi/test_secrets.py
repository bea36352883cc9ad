"""Credentials come from NodePublish secrets (or the plugin's config), reach the mount process
through a 0600 config file in the plugin's state dir, and never appear where a pod could see them."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.storage import open_store
from tests.csi.conftest import CsiEnv, Plugin

pytestmark = pytest.mark.fuse

SECRET = "s3cr3t-Value-for-this-test"


@pytest.fixture
def keyless_plugin(csi_env: CsiEnv, tmp_path: Path) -> Iterator[Plugin]:
    """A plugin whose own config has no credentials and an endpoint where nothing listens."""
    text = csi_env.config_path.read_text()
    text = re.sub(r'endpoint_url = ".*"', 'endpoint_url = "http://127.0.0.1:9"', text)
    text = re.sub(r"(access_key_id|secret_access_key) = .*\n", "", text)
    config_path = tmp_path / "plugin.toml"
    config_path.write_text(text)
    plugin = Plugin(tmp_path, config_path)
    try:
        yield plugin.start()
    finally:
        plugin.teardown()


def test_publish_secrets_reach_only_the_mount_process(keyless_plugin: Plugin, csi_env: CsiEnv) -> None:
    plugin = keyless_plugin
    parent = plugin.root / "pods" / "secret"
    parent.mkdir(parents=True)
    target = str(parent / "mount")
    secrets = {"s3Endpoint": csi_env.endpoint.url, "s3AccessKeyId": "testing", "s3SecretAccessKey": SECRET}
    plugin.publish(
        target, {"dataset": "imgs", "version": "1", "cache": "none"}, volume_id="sec", secrets=secrets
    )
    try:
        # reads work, so the secrets' endpoint was used (the plugin's own points nowhere)
        assert Path(target, "train", "b.bin").read_bytes() == csi_env.files[1]["train/b.bin"]
        [record] = plugin.state()
        volume_dir = Path(record["volume_dir"])
        config = volume_dir / "datahub.toml"
        assert SECRET in config.read_text()
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert stat.S_IMODE(volume_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(plugin.state_dir.stat().st_mode) == 0o700
        assert SECRET not in (plugin.state_dir / "published.json").read_text()
        with open(f"/proc/{record['pid']}/cmdline", "rb") as fh:
            assert SECRET.encode() not in fh.read()
        with open(f"/proc/{record['pid']}/environ", "rb") as fh:
            assert SECRET.encode() not in fh.read()
        for dirpath, _dirs, files in os.walk(target):  # the pod's view holds only the dataset
            assert not [f for f in files if f.endswith(".toml")], dirpath
    finally:
        plugin.unpublish(target, "sec")
    assert not volume_dir.exists()  # the credentials are gone with the volume


def test_a_pod_secret_cannot_point_the_plugin_at_its_own_catalog(
    keyless_plugin: Plugin, csi_env: CsiEnv, tmp_path: Path
) -> None:
    """A nodePublishSecretRef is a Secret in the pod's namespace. Were ``catalogUrl`` one of its
    keys, a catalog of the pod's making would decide the access check and name the records the
    mount process reads as root on the node: here a ``file://`` record of a node file no pod
    may read (the mount showed its bytes). The secret is refused and nothing is mounted."""
    node_file = tmp_path / "node-only" / "key.pem"
    node_file.parent.mkdir()
    node_file.write_bytes(b"-----BEGIN PRIVATE KEY----- the node's\n")
    os.chmod(node_file, 0o600)
    info = open_store(node_file.parent.as_uri(), csi_env.config).stat("key.pem")
    evil = open_catalog(f"sqlite:///{tmp_path / 'their-catalog.db'}")
    try:
        evil.create_dataset("imgs")  # the name of a dataset the pod may not read in the real one
        record = Record("key.pem", node_file.as_uri(), info.etag, info.size)
        evil.commit("imgs", [Put(record)], message="theirs")
    finally:
        evil.close()
    target = csi_env.target("their-catalog")
    secrets = {"catalogUrl": f"sqlite:///{tmp_path / 'their-catalog.db'}", "s3Endpoint": csi_env.endpoint.url}
    try:
        with pytest.raises(grpc.RpcError) as err:
            keyless_plugin.publish(
                target,
                {"dataset": "imgs", "version": "latest", "cache": "none"},
                volume_id="theirs",
                secrets=secrets,
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert "catalogUrl" in err.value.details() and "their-catalog" not in err.value.details()
        assert not keyless_plugin.state() and not os.path.exists(os.path.join(target, "key.pem"))
    finally:
        if keyless_plugin.state():  # before the fix: it was published; take it down
            keyless_plugin.unpublish(target, "theirs")
