"""Credentials come from NodePublish secrets (or the plugin's config), reach the mount process
through a 0600 config file in the plugin's state dir, and never appear where a pod could see them."""

from __future__ import annotations

import http.server
import os
import re
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from datahub.storage import open_store
from tests.csi.conftest import CsiEnv, Plugin, handed_clean

pytestmark = pytest.mark.fuse

SECRET = "s3cr3t-Value-for-this-test"


@pytest.fixture(scope="module")
def keyless_module_plugin(csi_env: CsiEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    """A plugin whose own config has no credentials and an endpoint where nothing listens."""
    root = tmp_path_factory.mktemp("keyless")
    text = csi_env.config_path.read_text()
    text = re.sub(r'endpoint_url = ".*"', 'endpoint_url = "http://127.0.0.1:9"', text)
    text = re.sub(r"(access_key_id|secret_access_key) = .*\n", "", text)
    config_path = root / "plugin.toml"
    config_path.write_text(text)
    plugin = Plugin(root, config_path)
    try:
        yield plugin.start()
    finally:
        plugin.teardown()


@pytest.fixture
def keyless_plugin(keyless_module_plugin: Plugin) -> Iterator[Plugin]:
    """``keyless_module_plugin``, with nothing published before and after the test."""
    yield from handed_clean(keyless_module_plugin)


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


class _TheirEndpoint(http.server.ThreadingHTTPServer):
    """An S3 endpoint a pod's Secret names, run by whoever wrote that Secret: it answers every
    GET of a key it knows with other bytes of the recorded size under the recorded etag (an
    etag is whatever the endpoint says; only a real S3 derives it from the bytes)."""

    def __init__(self, objects: dict[str, tuple[str, bytes]]) -> None:
        self.objects = objects  # "/bucket/key" -> (etag, bytes)
        super().__init__(("127.0.0.1", 0), _TheirHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _TheirHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        etag, data = self.server.objects.get(self.path.split("?")[0], ("", b""))  # type: ignore[attr-defined]
        if not etag:
            self.send_error(404)
            return
        ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        start, end = (int(ranged[1]), int(ranged[2] or len(data) - 1)) if ranged else (0, len(data) - 1)
        body = data[start : end + 1]
        self.send_response(206 if ranged else 200)
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{len(data)}")
        self.send_header("ETag", f'"{etag}"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_pages_from_an_endpoint_a_pod_chose_are_never_served_to_another_pod(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    """The node's disk cache keeps pages by (URL, etag, page), which name no endpoint. A pod
    whose Secret set ``s3Endpoint`` read a dataset from an endpoint of its choosing, and the
    next pod on the node to read that dataset (no secrets: the real S3) got those bytes from
    the cache. Such a volume now keeps its pages to itself (as ``cache: none``)."""
    real = {"train/x.bin": os.urandom(70_000), "y.txt": b"the real bytes\n"}
    seq = csi_env.commit("poisoned", real)
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        records = {r.key: r for r in catalog.list_records("poisoned", seq)}
    finally:
        catalog.close()
    objects = {}
    for key, r in records.items():
        bucket_key = r.url.removeprefix("s3://")
        objects[f"/{bucket_key}"] = (r.etag, bytes(b ^ 0xFF for b in real[key]))
    theirs = _TheirEndpoint(objects)
    threading.Thread(target=theirs.serve_forever, daemon=True).start()
    context = {"dataset": "poisoned", "version": str(seq)}
    first, second = csi_env.target("their-endpoint"), csi_env.target("next-pod")
    try:
        # keys of its own: the plugin's are never sent to another endpoint (caller71)
        own = {"s3Endpoint": theirs.url, "s3AccessKeyId": "theirs", "s3SecretAccessKey": "their-secret"}
        plugin.publish(first, context, volume_id="theirs", secrets=own)
        try:  # the pod that chose the endpoint reads what it serves (its own business)
            for key in real:
                assert (
                    Path(first, key).read_bytes() == objects[f"/{records[key].url.removeprefix('s3://')}"][1]
                )
        finally:
            plugin.unpublish(first, "theirs")
        plugin.publish(second, context, volume_id="next")
        try:
            for key, data in real.items():
                assert Path(second, key).read_bytes() == data, key
        finally:
            plugin.unpublish(second, "next")
    finally:
        theirs.shutdown()
        theirs.server_close()
