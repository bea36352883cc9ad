"""Issue 14: the spec's answers where the stateless controller and the node got them wrong,
and the controller's volume records, over the plugin's unix socket (as the external-provisioner
and the kubelet call it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import mongomock
import pytest

from csi.proto_gen import csi_pb2 as pb
from csi.volume_records import MongoVolumeRecords, SQLiteVolumeRecords, VolumeRecord
from tests.csi.conftest import CsiEnv, Mode, Plugin, capability

GiB = 1024**3


def create(plugin: Plugin, name: str, parameters: dict | None = None, **capacity: int) -> pb.Volume:
    request = pb.CreateVolumeRequest(
        name=name,
        volume_capabilities=[capability(Mode.SINGLE_NODE_WRITER)],
        parameters=parameters or {},
        capacity_range=pb.CapacityRange(**capacity) if capacity else None,
    )
    return plugin.controller.CreateVolume(request, timeout=30).volume


def error_of(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=30)
    return err.value


def get_volume(plugin: Plugin, volume_id: str) -> pb.Volume:
    return plugin.controller.ControllerGetVolume(
        pb.ControllerGetVolumeRequest(volume_id=volume_id), timeout=30
    ).volume


# --- defects 1 and 2: CreateVolume under a used name ---------------------------------------------
def test_same_name_with_other_parameters_is_already_exists(plugin: Plugin) -> None:
    first = create(plugin, "pvc-params", {"commitTo": "alpha"})
    err = error_of(
        plugin.controller.CreateVolume,
        pb.CreateVolumeRequest(
            name="pvc-params", volume_capabilities=[capability()], parameters={"commitTo": "beta"}
        ),
    )
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "commitTo=alpha" in err.details() and "commitTo=beta" in err.details()
    assert get_volume(plugin, first.volume_id).volume_context["commitTo"] == "alpha"  # unchanged
    assert create(plugin, "pvc-params", {"commitTo": "alpha"}) == first  # the same request: idempotent


def test_same_name_with_an_incompatible_capacity_range_is_already_exists(plugin: Plugin) -> None:
    first = create(plugin, "pvc-size", required_bytes=GiB)
    assert first.capacity_bytes == GiB
    err = error_of(
        plugin.controller.CreateVolume,
        pb.CreateVolumeRequest(
            name="pvc-size",
            volume_capabilities=[capability()],
            capacity_range=pb.CapacityRange(required_bytes=2 * GiB),
        ),
    )
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS and "capacity" in err.details()
    # a range the existing volume satisfies is the same volume, with its recorded capacity
    again = create(plugin, "pvc-size", required_bytes=GiB // 2, limit_bytes=4 * GiB)
    assert again == first and again.capacity_bytes == GiB
    assert get_volume(plugin, "pvc-size").capacity_bytes == GiB


def test_racing_create_volumes_for_one_name_end_with_one_volume(plugin: Plugin) -> None:
    """The external-provisioner may retry while the first call is still running: one record wins."""
    from concurrent.futures import ThreadPoolExecutor

    def attempt(i: int) -> str:
        request = pb.CreateVolumeRequest(
            name="pvc-race", volume_capabilities=[capability()], parameters={"commitTo": f"out{i % 2}"}
        )
        try:
            return plugin.controller.CreateVolume(request, timeout=30).volume.volume_context["commitTo"]
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.ALREADY_EXISTS, exc.details()
            return "refused"

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(attempt, range(16)))
    winner = get_volume(plugin, "pvc-race").volume_context["commitTo"]
    assert set(answers) == {winner, "refused"}
    assert answers.count(winner) == 8  # every request with the winner's parameters got the volume


# --- defect 3 and the records behind ValidateVolumeCapabilities / ControllerGetVolume --------
def test_validate_of_a_volume_never_created_is_not_found(plugin: Plugin) -> None:
    validate = plugin.controller.ValidateVolumeCapabilities
    never = pb.ValidateVolumeCapabilitiesRequest(
        volume_id="pvc-never-made", volume_capabilities=[capability()]
    )
    assert error_of(validate, never).code() == grpc.StatusCode.NOT_FOUND
    as_workspace = pb.ValidateVolumeCapabilitiesRequest(
        volume_id="pvc-never-made",
        volume_context={"workspace": "pvc-never-made"},
        volume_capabilities=[capability()],
    )
    assert error_of(validate, as_workspace).code() == grpc.StatusCode.NOT_FOUND
    no_dataset = pb.ValidateVolumeCapabilitiesRequest(
        volume_id="static-pv",
        volume_context={"dataset": "no-such-dataset"},
        volume_capabilities=[capability()],
    )
    err = error_of(validate, no_dataset)
    assert err.code() == grpc.StatusCode.NOT_FOUND and "no-such-dataset" in err.details()
    made = create(plugin, "pvc-validate")
    ok = pb.ValidateVolumeCapabilitiesRequest(
        volume_id=made.volume_id, volume_context=made.volume_context, volume_capabilities=[capability()]
    )
    assert validate(ok, timeout=30).HasField("confirmed")
    other = pb.ValidateVolumeCapabilitiesRequest(
        volume_id=made.volume_id,
        volume_context={"workspace": "somebody-else"},
        volume_capabilities=[capability()],
    )
    answer = validate(other, timeout=30)
    assert not answer.HasField("confirmed") and "volume_context" in answer.message


def test_get_volume_delete_volume_and_the_records_survive_a_restart(
    plugin: Plugin, csi_env: CsiEnv, tmp_path
) -> None:
    made = create(plugin, "pvc-lifecycle", {"commitTo": "outputs", "uid": "1000"}, required_bytes=3 * GiB)
    assert get_volume(plugin, made.volume_id) == made
    # another controller process (a restarted or newly elected replica) on the same catalog
    other = Plugin(tmp_path, csi_env.config_path).start()
    try:
        assert get_volume(other, made.volume_id) == made
        err = error_of(
            other.controller.CreateVolume,
            pb.CreateVolumeRequest(name="pvc-lifecycle", volume_capabilities=[capability()]),
        )
        assert err.code() == grpc.StatusCode.ALREADY_EXISTS
        other.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=made.volume_id), timeout=30)
    finally:
        other.teardown()
    lookup = pb.ControllerGetVolumeRequest(volume_id=made.volume_id)
    assert error_of(plugin.controller.ControllerGetVolume, lookup).code() == grpc.StatusCode.NOT_FOUND
    plugin.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=made.volume_id), timeout=30)  # idempotent
    # the name is free again, for any parameters
    assert (
        create(plugin, "pvc-lifecycle", {"commitTo": "elsewhere"}).volume_context["commitTo"] == "elsewhere"
    )
    empty = pb.ControllerGetVolumeRequest()
    assert error_of(plugin.controller.ControllerGetVolume, empty).code() == grpc.StatusCode.INVALID_ARGUMENT


def test_controller_advertises_get_volume(plugin: Plugin) -> None:
    caps = plugin.controller.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest(), timeout=10)
    RPC = pb.ControllerServiceCapability.RPC
    assert {c.rpc.type for c in caps.capabilities} == {RPC.CREATE_DELETE_VOLUME, RPC.GET_VOLUME}


# --- bad input: the code and the field's name; nothing half-created ------------------------------
@pytest.mark.parametrize(
    ("fields", "code", "named"),
    [
        ({"name": ""}, grpc.StatusCode.INVALID_ARGUMENT, "name"),
        ({"name": "x" * 129}, grpc.StatusCode.INVALID_ARGUMENT, "name"),
        ({"name": "pvc-bad\x01"}, grpc.StatusCode.INVALID_ARGUMENT, "name"),
        ({"parameters": {"commitTo": "Not A Name"}}, grpc.StatusCode.INVALID_ARGUMENT, "commitTo"),
        ({"parameters": {"uid": "root"}}, grpc.StatusCode.INVALID_ARGUMENT, "uid"),
        ({"parameters": {"gid": "-1"}}, grpc.StatusCode.INVALID_ARGUMENT, "gid"),
        ({"parameters": {"size": "1"}}, grpc.StatusCode.INVALID_ARGUMENT, "size"),
        ({"caps": []}, grpc.StatusCode.INVALID_ARGUMENT, "volume_capabilities"),
        ({"caps": [capability(block=True)]}, grpc.StatusCode.INVALID_ARGUMENT, "mount"),
        (
            {"caps": [capability(Mode.MULTI_NODE_MULTI_WRITER)]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "single-node",
        ),
        ({"caps": [capability(Mode.UNKNOWN)]}, grpc.StatusCode.INVALID_ARGUMENT, "access_mode"),
        ({"range": {"required_bytes": -1}}, grpc.StatusCode.INVALID_ARGUMENT, "required_bytes"),
        ({"range": {"limit_bytes": -5}}, grpc.StatusCode.INVALID_ARGUMENT, "limit_bytes"),
        (
            {"range": {"required_bytes": 2 * GiB, "limit_bytes": GiB}},
            grpc.StatusCode.INVALID_ARGUMENT,
            "limit_bytes",
        ),
        ({"range": {"required_bytes": 1 << 51}}, grpc.StatusCode.OUT_OF_RANGE, "required_bytes"),
        ({"range": {"limit_bytes": 1 << 60}}, grpc.StatusCode.OUT_OF_RANGE, "limit_bytes"),
    ],
)
def test_bad_create_volume_names_the_field_and_leaves_no_record(
    plugin: Plugin, fields: dict, code: grpc.StatusCode, named: str
) -> None:
    name = fields.get("name", "pvc-bad-input")
    request = pb.CreateVolumeRequest(
        name=name,
        volume_capabilities=fields.get("caps", [capability()]),
        parameters=fields.get("parameters", {}),
        capacity_range=pb.CapacityRange(**fields["range"]) if "range" in fields else None,
    )
    err = error_of(plugin.controller.CreateVolume, request)
    assert err.code() == code and named in err.details(), err.details()
    if name == "pvc-bad-input":  # nothing recorded: the name is free for a good request
        lookup = pb.ControllerGetVolumeRequest(volume_id=name)
        assert error_of(plugin.controller.ControllerGetVolume, lookup).code() == grpc.StatusCode.NOT_FOUND
        made = create(plugin, name, {"commitTo": "outputs"})
        plugin.controller.DeleteVolume(pb.DeleteVolumeRequest(volume_id=made.volume_id), timeout=30)


def test_a_failed_create_volume_leaves_no_workspace(plugin: Plugin, csi_env: CsiEnv) -> None:
    request = pb.CreateVolumeRequest(
        name="pvc-no-trace", volume_capabilities=[capability()], parameters={"uid": "nobody"}
    )
    error_of(plugin.controller.CreateVolume, request)
    home = csi_env.root / "var"
    assert not [p for p in home.rglob("*pvc-no-trace*")]
    from datahub.storage import StoreRegistry

    with StoreRegistry(csi_env.config) as stores:
        store = stores.store(f"s3://{csi_env.bucket}/objects/workspaces/pvc-no-trace")
        assert list(store.list("")) == []


# --- defect 4: republish readonly=false of a read-only dataset volume -------------------------------
@pytest.mark.fuse
def test_republish_of_a_read_only_dataset_volume_with_readonly_false_is_already_exists(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    target = csi_env.target("ro-republish")
    context = {"dataset": "imgs"}
    plugin.publish(target, context, volume_id="ro-vol", readonly=True, mode=Mode.MULTI_NODE_READER_ONLY)
    try:
        plugin.publish(target, context, volume_id="ro-vol", readonly=True, mode=Mode.MULTI_NODE_READER_ONLY)
        with pytest.raises(grpc.RpcError) as err:
            plugin.publish(
                target, context, volume_id="ro-vol", readonly=False, mode=Mode.MULTI_NODE_READER_ONLY
            )
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert Path(target, "README").read_bytes() == b"v2\n"  # still published, as it was
    finally:
        plugin.unpublish(target, "ro-vol")


# --- defect 5: never unmount what the plugin did not mount ------------------------------------------
@pytest.mark.fuse
def test_unpublish_leaves_a_mount_it_did_not_make(plugin: Plugin, csi_env: CsiEnv) -> None:
    target = csi_env.target("foreign-tmpfs")
    Path(target).mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", target], check=True)
    try:
        Path(target, "precious").write_bytes(b"keep me")
        err = error_of(
            plugin.node.NodeUnpublishVolume,
            pb.NodeUnpublishVolumeRequest(volume_id="vol-x", target_path=target),
        )
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert (
            "tmpfs" in err.details() and "did not make" in err.details() and "left mounted" in err.details()
        )
        assert Path(target, "precious").read_bytes() == b"keep me"
    finally:
        subprocess.run(["umount", target], check=True)


@pytest.mark.fuse
def test_unpublish_leaves_a_mount_stacked_on_its_volume(plugin: Plugin, csi_env: CsiEnv) -> None:
    target = csi_env.target("stacked-tmpfs")
    plugin.publish(target, {"dataset": "imgs"}, volume_id="stacked")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", target], check=True)
    try:
        err = error_of(
            plugin.node.NodeUnpublishVolume,
            pb.NodeUnpublishVolumeRequest(volume_id="stacked", target_path=target),
        )
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "tmpfs" in err.details()
    finally:
        subprocess.run(["umount", target], check=True)
    assert Path(target, "README").read_bytes() == b"v2\n"  # the volume is still there, untouched
    plugin.unpublish(target, "stacked")  # with the stranger gone, the retry succeeds
    assert not Path(target).exists()


# --- the record stores themselves ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["sqlite", "mongomock"])
def test_volume_records_insert_once_and_delete(tmp_path: Path, backend: str) -> None:
    if backend == "sqlite":
        records = SQLiteVolumeRecords(str(tmp_path / "catalog.db"))
    else:
        records = MongoVolumeRecords("mongomock://x/datahub", client=mongomock.MongoClient())
    try:
        first = VolumeRecord("pvc-a", "pvc-a", "pvc-a", {"commitTo": "out"}, GiB, 1.0)
        assert records.insert(first) == first
        assert records.insert(VolumeRecord("pvc-a", "pvc-a", "pvc-a", {}, 0, 2.0)) == first  # first one wins
        assert records.get("pvc-a") == first and records.list() == [first]
        assert records.delete("pvc-a") is True and records.delete("pvc-a") is False
        assert records.get("pvc-a") is None
    finally:
        records.close()
