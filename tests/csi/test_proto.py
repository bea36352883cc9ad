"""The compiled proto speaks CSI v1 on the wire: package, service paths and field numbers of the spec."""

from __future__ import annotations

import pytest

from csi.proto_gen import csi_pb2 as pb

# field numbers from container-storage-interface/spec csi.proto (v1.x) for every message we use
SPEC_FIELDS = {
    "GetPluginInfoResponse": {"name": 1, "vendor_version": 2, "manifest": 3},
    "GetPluginCapabilitiesResponse": {"capabilities": 1},
    "ProbeResponse": {"ready": 1},
    "VolumeCapability": {"block": 1, "mount": 2, "access_mode": 3},
    "CreateVolumeRequest": {
        "name": 1, "capacity_range": 2, "volume_capabilities": 3, "parameters": 4, "secrets": 5,
        "volume_content_source": 6, "accessibility_requirements": 7,
    },
    "Volume": {"capacity_bytes": 1, "volume_id": 2, "volume_context": 3, "content_source": 4, "accessible_topology": 5},
    "DeleteVolumeRequest": {"volume_id": 1, "secrets": 2},
    "ValidateVolumeCapabilitiesRequest": {
        "volume_id": 1, "volume_context": 2, "volume_capabilities": 3, "parameters": 4, "secrets": 5,
    },
    "ValidateVolumeCapabilitiesResponse": {"confirmed": 1, "message": 2},
    "ControllerGetCapabilitiesResponse": {"capabilities": 1},
    "ControllerGetVolumeRequest": {"volume_id": 1},
    "ControllerGetVolumeResponse": {"volume": 1, "status": 2},
    "VolumeCondition": {"abnormal": 1, "message": 2},
    "NodePublishVolumeRequest": {
        "volume_id": 1, "publish_context": 2, "staging_target_path": 3, "target_path": 4,
        "volume_capability": 5, "readonly": 6, "secrets": 7, "volume_context": 8,
    },
    "NodeUnpublishVolumeRequest": {"volume_id": 1, "target_path": 2},
    "NodeStageVolumeRequest": {
        "volume_id": 1, "publish_context": 2, "staging_target_path": 3, "volume_capability": 4, "secrets": 5,
        "volume_context": 6,
    },
    "NodeUnstageVolumeRequest": {"volume_id": 1, "staging_target_path": 2},
    "NodeGetVolumeStatsRequest": {"volume_id": 1, "volume_path": 2, "staging_target_path": 3},
    "NodeGetVolumeStatsResponse": {"usage": 1, "volume_condition": 2},
    "VolumeUsage": {"available": 1, "total": 2, "used": 3, "unit": 4},
    "NodeGetCapabilitiesResponse": {"capabilities": 1},
    "NodeGetInfoResponse": {"node_id": 1, "max_volumes_per_node": 2, "accessible_topology": 3},
}  # fmt: skip


@pytest.mark.parametrize("message", sorted(SPEC_FIELDS))
def test_field_numbers_are_the_specs(message: str) -> None:
    descriptor = getattr(pb, message).DESCRIPTOR
    assert descriptor.full_name == f"csi.v1.{message}"
    assert {f.name: f.number for f in descriptor.fields} == SPEC_FIELDS[message]


def test_services_and_enums() -> None:
    services = {s.full_name: [m.name for m in s.methods] for s in pb.DESCRIPTOR.services_by_name.values()}
    assert services == {
        "csi.v1.Identity": ["GetPluginInfo", "GetPluginCapabilities", "Probe"],
        "csi.v1.Controller": [
            "CreateVolume",
            "DeleteVolume",
            "ValidateVolumeCapabilities",
            "ControllerGetCapabilities",
            "ControllerGetVolume",
        ],
        "csi.v1.Node": [
            "NodeStageVolume",
            "NodeUnstageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeGetVolumeStats",
            "NodeGetCapabilities",
            "NodeGetInfo",
        ],
    }
    modes = pb.VolumeCapability.AccessMode.Mode
    assert [
        modes.Value(n) for n in ("SINGLE_NODE_WRITER", "MULTI_NODE_READER_ONLY", "SINGLE_NODE_MULTI_WRITER")
    ] == [1, 3, 7]
    assert pb.ControllerServiceCapability.RPC.CREATE_DELETE_VOLUME == 1
    assert pb.ControllerServiceCapability.RPC.GET_VOLUME == 12
    assert pb.PluginCapability.Service.CONTROLLER_SERVICE == 1
    assert pb.NodeServiceCapability.RPC.STAGE_UNSTAGE_VOLUME == 1
    assert pb.NodeServiceCapability.RPC.GET_VOLUME_STATS == 2
    assert pb.NodeServiceCapability.RPC.VOLUME_CONDITION == 4
    assert pb.VolumeUsage.BYTES == 1 and pb.VolumeUsage.INODES == 2
