"""The same publish/read/unpublish round trip with the objects on a real Ceph RGW."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.csi.conftest import CsiEnv, Plugin, make_env
from tests.servers import S3Endpoint
from tests.writeback.flushed import workspace_object_key

pytestmark = [pytest.mark.fuse, pytest.mark.ceph]


@pytest.fixture(scope="module")
def ceph_env(tmp_path_factory: pytest.TempPathFactory, ceph_endpoint: S3Endpoint) -> CsiEnv:
    return make_env(tmp_path_factory.mktemp("csi-ceph"), ceph_endpoint)


@pytest.fixture(scope="module")
def ceph_plugin(ceph_env: CsiEnv) -> Iterator[Plugin]:
    p = Plugin(ceph_env.root, ceph_env.config_path)
    try:
        yield p.start()
    finally:
        p.teardown()


def test_dataset_and_workspace_volumes_on_ceph(ceph_plugin: Plugin, ceph_env: CsiEnv) -> None:
    ds, ws = ceph_env.target("ds"), ceph_env.target("ws")
    ceph_plugin.publish(ds, {"dataset": "imgs", "version": "stable"}, volume_id="ds")
    ceph_plugin.publish(ws, {"workspace": "ceph-run", "commitTo": "ceph-out"}, volume_id="ws")
    try:
        assert Path(ds, "train", "a.bin").read_bytes() == ceph_env.files[1]["train/a.bin"]
        Path(ws, "result.txt").write_bytes(b"on ceph")
    finally:
        ceph_plugin.unpublish(ds, "ds")
        ceph_plugin.unpublish(ws, "ws")
    client = ceph_env.endpoint.client()
    key = workspace_object_key(client, ceph_env.bucket, "ceph-run", "result.txt")
    body = client.get_object(Bucket=ceph_env.bucket, Key=key)["Body"]
    assert body.read() == b"on ceph"
