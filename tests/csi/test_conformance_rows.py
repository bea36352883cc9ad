"""The rows of docs/csi.md's conformance table that no test checked over the socket: the RPCs
"not served" answer UNIMPLEMENTED (no handler, not an error of ours), CreateVolume refuses a
content source, and a node-only plugin advertises no controller service (its Probe waits for
its first check of recorded volumes, as the table says)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest

from csi.proto_gen import csi_pb2 as pb
from tests.csi.conftest import CsiEnv, Mode, Plugin, capability

# every RPC of the spec (v1.x) the table marks "not served", as gRPC method paths
NOT_SERVED = [
    "/csi.v1.Controller/ControllerPublishVolume",
    "/csi.v1.Controller/ControllerUnpublishVolume",
    "/csi.v1.Controller/ListVolumes",
    "/csi.v1.Controller/GetCapacity",
    "/csi.v1.Controller/CreateSnapshot",
    "/csi.v1.Controller/DeleteSnapshot",
    "/csi.v1.Controller/ListSnapshots",
    "/csi.v1.Controller/ControllerExpandVolume",
    "/csi.v1.Controller/ControllerModifyVolume",
    "/csi.v1.Node/NodeExpandVolume",
    "/csi.v1.GroupController/GroupControllerGetCapabilities",
    "/csi.v1.GroupController/CreateVolumeGroupSnapshot",
    "/csi.v1.SnapshotMetadata/GetMetadataAllocated",
]


def _code(call, request) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=30)
    return err.value.code()


@pytest.mark.parametrize("method", NOT_SERVED)
def test_an_rpc_not_served_answers_unimplemented(plugin: Plugin, method: str) -> None:
    assert plugin.channel is not None
    call = plugin.channel.unary_unary(method, request_serializer=bytes, response_deserializer=bytes)
    assert _code(call, b"") == grpc.StatusCode.UNIMPLEMENTED


def test_create_volume_with_a_content_source_is_invalid_argument(plugin: Plugin) -> None:
    request = pb.CreateVolumeRequest(
        name="pvc-from-snapshot",
        volume_capabilities=[capability(Mode.SINGLE_NODE_WRITER)],
        volume_content_source=pb.VolumeContentSource(
            snapshot=pb.VolumeContentSource.SnapshotSource(snapshot_id="snap-1")
        ),
    )
    assert _code(plugin.controller.CreateVolume, request) == grpc.StatusCode.INVALID_ARGUMENT
    # refused before anything is recorded: the name is unknown afterwards
    get = pb.ControllerGetVolumeRequest(volume_id="pvc-from-snapshot")
    assert _code(plugin.controller.ControllerGetVolume, get) == grpc.StatusCode.NOT_FOUND


def test_a_node_only_plugin_advertises_no_controller_service(csi_env: CsiEnv, tmp_path: Path) -> None:
    config = tmp_path / "plugin.toml"  # its own cache home: the module's plugin keeps its own
    home = f'home = "{csi_env.root / "var"}"\n'
    assert home in csi_env.config_path.read_text()
    config.write_text(csi_env.config_path.read_text().replace(home, f'home = "{tmp_path / "node"}"\n'))
    plugin = Plugin(tmp_path, config, mode="node")
    try:
        plugin.start()  # returns once Probe said ready: the first check of recorded volumes is done
        caps = plugin.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest(), timeout=10)
        assert list(caps.capabilities) == []
        request = pb.ControllerGetCapabilitiesRequest()
        assert _code(plugin.controller.ControllerGetCapabilities, request) == grpc.StatusCode.UNIMPLEMENTED
        assert plugin.node.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=10).node_id
    finally:
        plugin.teardown()


@pytest.mark.fuse
@pytest.mark.parametrize("rpc", ["stage", "publish", "unstage"])
def test_a_path_that_is_someone_elses_mount_is_failed_precondition_and_left(
    plugin: Plugin, csi_env: CsiEnv, rpc: str
) -> None:
    """NodeStageVolume and NodePublishVolume onto a path another mount holds, and
    NodeUnstageVolume of one: FAILED_PRECONDITION, and the stranger's files stay."""
    path = csi_env.target(f"foreign-{rpc}")
    Path(path).mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", path], check=True)
    try:
        Path(path, "precious").write_bytes(b"keep me")
        calls = {
            "stage": lambda: plugin.stage(path, {"dataset": "imgs"}, volume_id="foreign"),
            "publish": lambda: plugin.publish(path, {"dataset": "imgs"}, volume_id="foreign"),
            "unstage": lambda: plugin.unstage(path, "foreign"),
        }
        with pytest.raises(grpc.RpcError) as err:
            calls[rpc]()
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        assert Path(path, "precious").read_bytes() == b"keep me"
    finally:
        subprocess.run(["umount", path], check=True)
    assert all(r["target_path"] != path for r in plugin.state())  # nothing recorded there
