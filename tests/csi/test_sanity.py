"""csi-sanity style checks of Identity, Node and Controller over the unix socket (no mounts)."""

from __future__ import annotations

import grpc
import pytest

from csi.proto_gen import csi_pb2 as pb
from tests.csi.conftest import NODE_ID, Mode, Plugin, capability


def code_of(call, request) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=60)
    return err.value.code()


# --- Identity ---------------------------------------------------------------------------------
def test_plugin_info_names_the_driver(plugin: Plugin) -> None:
    info = plugin.identity.GetPluginInfo(pb.GetPluginInfoRequest(), timeout=10)
    assert info.name == "csi.datahub.dev" and info.vendor_version


def test_plugin_capabilities_and_probe(plugin: Plugin) -> None:
    caps = plugin.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest(), timeout=10)
    types = [c.service.type for c in caps.capabilities]
    assert types == [pb.PluginCapability.Service.CONTROLLER_SERVICE]
    assert plugin.identity.Probe(pb.ProbeRequest(), timeout=10).ready.value is True


# --- Node ---------------------------------------------------------------------------------------
def test_node_info_and_capabilities(plugin: Plugin) -> None:
    assert plugin.node.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=10).node_id == NODE_ID
    # STAGE_UNSTAGE_VOLUME: one mount process per staged volume, bound into every pod publishing it
    caps = plugin.node.NodeGetCapabilities(pb.NodeGetCapabilitiesRequest(), timeout=10).capabilities
    rpc_type = pb.NodeServiceCapability.RPC
    assert [c.rpc.type for c in caps] == [
        rpc_type.STAGE_UNSTAGE_VOLUME,
        rpc_type.GET_VOLUME_STATS,
        rpc_type.VOLUME_CONDITION,
    ]


def test_publish_without_required_fields_is_invalid_argument(plugin: Plugin, csi_env) -> None:
    target = csi_env.target("sanity")
    ctx = {"dataset": "imgs"}
    publish = plugin.node.NodePublishVolume
    full = dict(volume_id="v", target_path=target, volume_capability=capability(), volume_context=ctx)
    for missing in ("volume_id", "target_path", "volume_capability"):
        request = pb.NodePublishVolumeRequest(**{k: v for k, v in full.items() if k != missing})
        assert code_of(publish, request) == grpc.StatusCode.INVALID_ARGUMENT, missing
    relative = pb.NodePublishVolumeRequest(**{**full, "target_path": "relative/path"})
    assert code_of(publish, relative) == grpc.StatusCode.INVALID_ARGUMENT
    block = pb.NodePublishVolumeRequest(**{**full, "volume_capability": capability(block=True)})
    assert code_of(publish, block) == grpc.StatusCode.INVALID_ARGUMENT
    no_mode = pb.VolumeCapability()
    no_mode.mount.SetInParent()
    assert code_of(publish, pb.NodePublishVolumeRequest(**{**full, "volume_capability": no_mode})) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    secret = pb.NodePublishVolumeRequest(**full, secrets={"password": "hunter2"})
    with pytest.raises(grpc.RpcError) as err:
        publish(secret, timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "hunter2" not in err.value.details()


def test_unpublish_without_required_fields_is_invalid_argument(plugin: Plugin, csi_env) -> None:
    unpublish = plugin.node.NodeUnpublishVolume
    target = csi_env.target("sanity-unpub")
    assert (
        code_of(unpublish, pb.NodeUnpublishVolumeRequest(target_path=target))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (
        code_of(unpublish, pb.NodeUnpublishVolumeRequest(volume_id="v")) == grpc.StatusCode.INVALID_ARGUMENT
    )


def test_unpublish_of_a_target_never_published_succeeds(plugin: Plugin, csi_env) -> None:
    plugin.unpublish(csi_env.target("never"), "never")


# --- Controller -----------------------------------------------------------------------------------
def test_controller_capabilities(plugin: Plugin) -> None:
    caps = plugin.controller.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest(), timeout=10)
    assert [c.rpc.type for c in caps.capabilities] == [
        pb.ControllerServiceCapability.RPC.CREATE_DELETE_VOLUME,
        pb.ControllerServiceCapability.RPC.GET_VOLUME,
    ]


def test_create_volume_makes_an_idempotent_workspace_volume(plugin: Plugin) -> None:
    request = pb.CreateVolumeRequest(
        name="pvc-0b9f7c1e-3a44-4d2e-9c1f-5e6a7b8c9d0e",
        volume_capabilities=[capability(Mode.SINGLE_NODE_WRITER)],
        parameters={"commitTo": "outputs"},
        capacity_range=pb.CapacityRange(required_bytes=10 * 1024**3),
    )
    first = plugin.controller.CreateVolume(request, timeout=10).volume
    again = plugin.controller.CreateVolume(request, timeout=10).volume
    assert first == again
    assert first.volume_id == "pvc-0b9f7c1e-3a44-4d2e-9c1f-5e6a7b8c9d0e"
    assert dict(first.volume_context) == {
        "workspace": first.volume_id,
        "commitTo": "outputs",
        "quotaBytes": str(10 * 1024**3),  # the capacity is the workspace's quota
    }
    assert first.capacity_bytes == 10 * 1024**3
    odd = plugin.controller.CreateVolume(
        pb.CreateVolumeRequest(name="My Volume!", volume_capabilities=[capability()]), timeout=10
    ).volume
    assert odd.volume_id.startswith("my-volume-") and odd.volume_id == odd.volume_context["workspace"]
    plugin.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=first.volume_id), timeout=10)
    plugin.controller.DeleteVolume(
        pb.DeleteVolumeRequest(volume_id=first.volume_id), timeout=10
    )  # idempotent


@pytest.mark.parametrize(
    "request_fields",
    [
        {"volume_capabilities": [capability()]},  # no name
        {"name": "pvc-1"},  # no capabilities
        {"name": "pvc-1", "volume_capabilities": [capability(block=True)]},
        {"name": "pvc-1", "volume_capabilities": [capability(Mode.MULTI_NODE_MULTI_WRITER)]},
        {"name": "pvc-1", "volume_capabilities": [capability()], "parameters": {"dataset": "imgs"}},
        {"name": "pvc-1", "volume_capabilities": [capability()], "parameters": {"commitTo": "Bad Name"}},
    ],
)
def test_create_volume_rejects_what_it_cannot_provision(plugin: Plugin, request_fields: dict) -> None:
    request = pb.CreateVolumeRequest(**request_fields)
    assert code_of(plugin.controller.CreateVolume, request) == grpc.StatusCode.INVALID_ARGUMENT


def test_delete_volume_without_id_is_invalid_argument(plugin: Plugin) -> None:
    assert (
        code_of(plugin.controller.DeleteVolume, pb.DeleteVolumeRequest()) == grpc.StatusCode.INVALID_ARGUMENT
    )


def test_validate_volume_capabilities(plugin: Plugin) -> None:
    validate = plugin.controller.ValidateVolumeCapabilities
    ds = pb.ValidateVolumeCapabilitiesRequest(
        volume_id="imgs",
        volume_context={"dataset": "imgs"},
        volume_capabilities=[capability(Mode.MULTI_NODE_READER_ONLY)],
    )
    assert validate(ds, timeout=10).confirmed.volume_capabilities == ds.volume_capabilities
    # a workspace volume must exist (CreateVolume recorded it) before its capabilities are judged
    made = plugin.controller.CreateVolume(
        pb.CreateVolumeRequest(name="w", volume_capabilities=[capability()]), timeout=10
    ).volume
    ws = pb.ValidateVolumeCapabilitiesRequest(
        volume_id=made.volume_id,
        volume_context=made.volume_context,
        volume_capabilities=[capability(Mode.MULTI_NODE_MULTI_WRITER)],
    )
    answer = validate(ws, timeout=10)
    assert not answer.HasField("confirmed") and "single-node" in answer.message
    block = pb.ValidateVolumeCapabilitiesRequest(
        volume_id="imgs", volume_context={"dataset": "imgs"}, volume_capabilities=[capability(block=True)]
    )
    assert not validate(block, timeout=10).HasField("confirmed")
    assert code_of(validate, pb.ValidateVolumeCapabilitiesRequest(volume_capabilities=[capability()])) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (
        code_of(validate, pb.ValidateVolumeCapabilitiesRequest(volume_id="imgs"))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
