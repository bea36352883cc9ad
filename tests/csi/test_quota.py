"""A provisioned workspace volume's capacity is a quota: df shows it, writes past it fail with
ENOSPC, and the file that hit it is never committed half-written (issue 14)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from csi.proto_gen import csi_pb2 as pb
from datahub.catalog import open_catalog
from tests.csi.conftest import CsiEnv, Mode, Plugin, capability, wait_until

pytestmark = pytest.mark.fuse

QUOTA = 1024 * 1024


def write_file(path: Path, size: int, chunk: int = 64 * 1024) -> None:
    """Write ``size`` bytes in chunks, as a training loop saving a checkpoint would."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for offset in range(0, size, chunk):
            os.write(fd, b"w" * min(chunk, size - offset))
    finally:
        os.close(fd)


def test_capacity_is_a_quota_seen_by_df_and_enforced_with_enospc(plugin: Plugin, csi_env: CsiEnv) -> None:
    request = pb.CreateVolumeRequest(
        name="pvc-quota",
        volume_capabilities=[capability(Mode.SINGLE_NODE_WRITER)],
        parameters={"commitTo": "quota-outputs"},
        capacity_range=pb.CapacityRange(required_bytes=QUOTA),
    )
    volume = plugin.controller.CreateVolume(request, timeout=30).volume
    assert volume.capacity_bytes == QUOTA and volume.volume_context["quotaBytes"] == str(QUOTA)
    target = csi_env.target("quota")
    plugin.publish(target, dict(volume.volume_context), volume_id=volume.volume_id)
    try:
        df = os.statvfs(target)
        assert df.f_blocks * df.f_frsize == QUOTA and df.f_bavail * df.f_frsize == QUOTA

        write_file(Path(target, "a.bin"), 600_000)
        df = os.statvfs(target)
        assert df.f_bavail * df.f_frsize == (QUOTA - 600_000) // df.f_frsize * df.f_frsize

        with pytest.raises(OSError) as exc:  # at a write, or at the latest at close
            write_file(Path(target, "b.bin"), 600_000)
        assert exc.value.errno == errno.ENOSPC
        # discarded before close returned: nothing half-written stays (the kernel's cached
        # name is dropped asynchronously, so wait for the listing to agree)
        wait_until(lambda: not Path(target, "b.bin").exists(), 30, "b.bin discarded")
        assert os.listdir(target) == ["a.bin"]
        assert os.statvfs(target).f_bavail * df.f_frsize == df.f_bavail * df.f_frsize  # its space is back

        # space freed by replacing a file is usable again
        write_file(Path(target, "a.bin"), 900_000)
        assert Path(target, "a.bin").stat().st_size == 900_000
        with pytest.raises(OSError) as exc:
            os.truncate(Path(target, "a.bin"), QUOTA + 1)
        assert exc.value.errno == errno.ENOSPC
    finally:
        plugin.unpublish(target, volume.volume_id)
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        records = {r.key: r.size for r in catalog.list_records("quota-outputs", None)}
    finally:
        catalog.close()
    assert records == {"a.bin": 900_000}
    plugin.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=volume.volume_id), timeout=30)


def test_a_quota_counts_what_the_workspace_already_holds(plugin: Plugin, csi_env: CsiEnv) -> None:
    """Publishing again (a new pod, a restarted node) measures the files the workspace kept."""
    context = {"workspace": "quota-again", "quotaBytes": str(QUOTA)}
    target = csi_env.target("quota-again")
    plugin.publish(target, context, volume_id="quota-again")
    try:
        write_file(Path(target, "kept.bin"), 700_000)
    finally:
        plugin.unpublish(target, "quota-again")
    plugin.publish(target, context, volume_id="quota-again")
    try:
        df = os.statvfs(target)
        assert df.f_bavail * df.f_frsize == (QUOTA - 700_000) // df.f_frsize * df.f_frsize
        with pytest.raises(OSError) as exc:
            write_file(Path(target, "more.bin"), 400_000)
        assert exc.value.errno == errno.ENOSPC
    finally:
        plugin.unpublish(target, "quota-again")
