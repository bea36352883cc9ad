"""NodeUnpublishVolume does not forget a workspace until its acknowledged files reached the object store."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from datahub.catalog import open_catalog
from tests.csi.conftest import CsiEnv, Plugin, mounts_under, wait_for_checks
from tests.moto_launch import MOTO_SERVER
from tests.servers import free_port, wait_for_port
from tests.writeback.flushed import workspace_object_key

pytestmark = [pytest.mark.fuse, pytest.mark.slow]


class PrivateMoto:
    """A moto server of this test alone, so it can be stopped and started again on its port."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "private-moto.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*MOTO_SERVER, "-H", "127.0.0.1", "-p", str(self.port)], stdout=log, stderr=log
            )
        wait_for_port(self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def private_moto(tmp_path: Path) -> Iterator[PrivateMoto]:
    moto = PrivateMoto(tmp_path)
    moto.start()
    try:
        yield moto
    finally:
        moto.stop()


@pytest.fixture
def plugin(csi_env: CsiEnv, private_moto: PrivateMoto, tmp_path: Path) -> Iterator[Plugin]:
    """A plugin whose objects bucket (``objects_url``, a workspace's flush target) lives on the
    private server: a workspace volume flushes there with the plugin's ``objects_s3``, whatever
    its secrets say (docs/csi.md "Credentials")."""
    config = tmp_path / "datahub.toml"
    config.write_text(
        csi_env.config_path.read_text()
        + f'\n[objects_s3]\nendpoint_url = "{private_moto.url}"\naccess_key_id = "testing"\n'
        'secret_access_key = "testing"\nregion = "us-east-1"\nmax_attempts = 2\n'
    )
    p = Plugin(tmp_path, config)
    try:
        yield p.start()
    finally:
        p.teardown()


def test_unpublish_fails_and_keeps_the_volume_until_the_flush_succeeds(
    plugin: Plugin, csi_env: CsiEnv, private_moto: PrivateMoto, tmp_path: Path
) -> None:
    import boto3
    from botocore.config import Config as BotoConfig

    def private_client():
        return boto3.client(
            "s3", endpoint_url=private_moto.url, aws_access_key_id="testing", aws_secret_access_key="testing",
            region_name="us-east-1", config=BotoConfig(s3={"addressing_style": "path"}),
        )  # fmt: skip

    private_client().create_bucket(Bucket=csi_env.bucket)
    (tmp_path / "pods" / "ws-outage").mkdir(parents=True)
    target = str(tmp_path / "pods" / "ws-outage" / "mount")
    plugin.publish(target, {"workspace": "outage", "commitTo": "outage-out"}, volume_id="outage")
    Path(target, "model.bin").write_bytes(b"acknowledged before the outage")

    private_moto.stop()  # the object store goes away before the pod ends
    with pytest.raises(grpc.RpcError) as err:
        plugin.unpublish(target, "outage")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value.details()
    assert [p["volume_id"] for p in plugin.state() if p["target_path"] == target] == ["outage"]
    assert not [m for m in mounts_under(Path(target).parent)]  # the pod's view is gone already
    [record] = [p for p in plugin.state() if p["target_path"] == target]
    assert record["unpublishing"]  # so the supervisor leaves it alone (it checks every 0.5 s here)
    wait_for_checks(plugin, 3)
    assert not [m for m in mounts_under(Path(target).parent)]  # not remounted behind the CO's back
    with pytest.raises(grpc.RpcError) as err:  # nor published again before the unpublish succeeded
        plugin.publish(target, {"workspace": "outage", "commitTo": "outage-out"}, volume_id="outage")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    private_moto.start()  # back (empty: moto keeps nothing), the CO retries
    private_client().create_bucket(Bucket=csi_env.bucket)
    plugin.unpublish(target, "outage")
    assert [p for p in plugin.state() if p["target_path"] == target] == []
    key = workspace_object_key(private_client(), csi_env.bucket, "outage", "model.bin")
    body = private_client().get_object(Bucket=csi_env.bucket, Key=key)["Body"]
    assert body.read() == b"acknowledged before the outage"
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        assert [r.key for r in catalog.list_records("outage-out", None)] == ["model.bin"]
    finally:
        catalog.close()
