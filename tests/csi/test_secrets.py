"""Credentials come from NodePublish secrets (or the plugin's config), reach the mount process
through a 0600 config file in the plugin's state dir, and never appear where a pod could see them."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

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
