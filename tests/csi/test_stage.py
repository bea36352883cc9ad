"""NodeStageVolume / NodeUnstageVolume: one mount process per staged volume, bound into every pod.

Real FUSE mounts and real bind mounts; reads are compared byte for byte with what was committed.
"""

from __future__ import annotations

import errno
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from tests.csi.conftest import CsiEnv, Mode, Plugin, mounts_under
from tests.csi.test_publish import pod_info, read_tree

pytestmark = pytest.mark.fuse


def staging_path(env: CsiEnv, name: str) -> str:
    """A staging path as the kubelet hands it over: a directory that exists (the CO creates it)."""
    path = env.root / "plugins" / name / "globalmount"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def fuse_daemons(plugin: Plugin) -> set[int]:
    """The pids of the live mount processes the plugin recorded (targets bound from a stage have none)."""
    return {p["pid"] for p in plugin.state() if p.get("pid") and os.path.exists(f"/proc/{p['pid']}")}


def fuse_mounts(plugin: Plugin) -> list[str]:
    with open("/proc/self/mountinfo") as fh:
        fuse = [line.split()[4] for line in fh if " - fuse" in line]
    return [m for m in fuse if m.startswith(str(plugin.state_dir) + "/")]


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()


def test_pods_share_one_staged_daemon_and_unpublishing_one_leaves_the_others_reading(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    staging = staging_path(csi_env, "shared")
    context = {"dataset": "imgs", "version": "1"}
    plugin.stage(staging, context, volume_id="shared", mode=Mode.MULTI_NODE_READER_ONLY)
    plugin.stage(staging, context, volume_id="shared", mode=Mode.MULTI_NODE_READER_ONLY)  # idempotent
    pods = [csi_env.target(f"shared-{i}") for i in range(3)]
    v1 = csi_env.files[1]
    try:
        with ThreadPoolExecutor(len(pods)) as pool:  # pods starting together
            list(pool.map(lambda i: plugin.publish(pods[i], {**context, **pod_info("team-a", f"pod-{i}")},
                                                   volume_id="shared", staging=staging,
                                                   mode=Mode.MULTI_NODE_READER_ONLY), range(len(pods))))  # fmt: skip
        assert len(fuse_daemons(plugin)) == 1 and len(fuse_mounts(plugin)) == 1
        assert read_tree(staging) == v1  # the CO's staging path shows the volume too
        with pytest.raises(OSError) as exc:
            Path(pods[0], "new.txt").write_bytes(b"x")
        assert exc.value.errno == errno.EROFS
        assert Path(pods[0], "README").read_bytes() == b"v1\n"

        plugin.unpublish(pods[0], "shared")
        assert not os.path.exists(pods[0])
        for target in pods[1:]:  # a file none of them read before, then the whole tree
            assert Path(target, "train", "b.bin").read_bytes() == v1["train/b.bin"]
            assert read_tree(target) == v1
        # NodeUnstage while pods still read it: refused, nothing changes
        assert code_of(lambda: plugin.unstage(staging, "shared")) == grpc.StatusCode.FAILED_PRECONDITION
        assert Path(pods[1], "train", "a.bin").read_bytes() == v1["train/a.bin"]
        # the stage is not a target: NodeUnpublish of the staging path is refused
        assert code_of(lambda: plugin.unpublish(staging, "shared")) == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        for target in pods:
            plugin.unpublish(target, "shared")
    daemon = fuse_daemons(plugin)
    plugin.unstage(staging, "shared")
    assert fuse_mounts(plugin) == [] and mounts_under(Path(staging).parent) == []
    assert not any(os.path.exists(f"/proc/{pid}/cmdline") and not _zombie(pid) for pid in daemon)
    assert os.path.isdir(staging)  # the CO's directory: the CO removes it
    plugin.unstage(staging, "shared")  # unstaged already: still success
    assert [p for p in plugin.state() if p["volume_id"] == "shared"] == []


def test_stage_answers_the_specs_cases(plugin: Plugin, csi_env: CsiEnv) -> None:
    staging, other = staging_path(csi_env, "cases"), staging_path(csi_env, "cases-other")
    target = csi_env.target("cases")
    v1 = {"dataset": "imgs", "version": "1"}
    # required fields
    assert code_of(lambda: plugin.stage("", v1, volume_id="cases")) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: plugin.stage(staging, v1, volume_id="")) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: plugin.unstage("", "cases")) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: plugin.unstage(staging, "")) == grpc.StatusCode.INVALID_ARGUMENT
    # a dataset that does not exist; a bad attribute; nothing is left behind
    assert (
        code_of(lambda: plugin.stage(staging, {"dataset": "nosuch"}, volume_id="cases"))
        == grpc.StatusCode.NOT_FOUND
    )
    assert code_of(lambda: plugin.stage(staging, {**v1, "colour": "red"}, volume_id="cases")) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert mounts_under(Path(staging).parent) == []
    assert all(p["target_path"] != staging for p in plugin.state())
    # publishing from a staging path nothing was staged at
    assert code_of(lambda: plugin.publish(target, v1, volume_id="cases", staging=staging)) == (
        grpc.StatusCode.FAILED_PRECONDITION
    )
    assert not os.path.exists(target)
    plugin.stage(staging, v1, volume_id="cases")
    try:
        # the same staging path with another version: a different volume, refused
        assert code_of(
            lambda: plugin.stage(staging, {"dataset": "imgs", "version": "2"}, volume_id="cases")
        ) == (grpc.StatusCode.ALREADY_EXISTS)
        # a pod asking for another version than the one staged never shares its mount
        assert (
            code_of(
                lambda: plugin.publish(
                    target, {"dataset": "imgs", "version": "2"}, volume_id="cases", staging=staging
                )
            )
            == grpc.StatusCode.FAILED_PRECONDITION
        )
        # another volume's staging path
        assert code_of(lambda: plugin.publish(target, v1, volume_id="nope", staging=staging)) == (
            grpc.StatusCode.NOT_FOUND
        )
        assert code_of(lambda: plugin.unstage(staging, "nope")) == grpc.StatusCode.NOT_FOUND
        assert not os.path.exists(target)
        # two versions staged at two paths: two mount processes, each its own version
        plugin.stage(other, {"dataset": "imgs", "version": "2"}, volume_id="cases-v2")
        assert Path(staging, "README").read_bytes() == b"v1\n"
        assert Path(other, "README").read_bytes() == b"v2\n"
        assert len(fuse_mounts(plugin)) >= 2
        # a publish bringing other credentials than the stage's mount runs with
        other_keys = {"s3Region": "eu-west-9"}
        assert code_of(
            lambda: plugin.publish(target, v1, volume_id="cases", staging=staging, secrets=other_keys)
        ) == (grpc.StatusCode.FAILED_PRECONDITION)
        assert not os.path.exists(target)
        # publish: idempotent, then ALREADY_EXISTS for the same target asked differently
        plugin.publish(target, v1, volume_id="cases", staging=staging, secrets={"s3Region": "us-east-1"})
        plugin.publish(target, v1, volume_id="cases", staging=staging)
        assert code_of(
            lambda: plugin.publish(target, v1, volume_id="cases", staging=staging, readonly=True)
        ) == (grpc.StatusCode.ALREADY_EXISTS)
        assert Path(target, "README").read_bytes() == b"v1\n"
        # a target holding another volume
        assert code_of(lambda: plugin.unpublish(target, "cases-v2")) == grpc.StatusCode.NOT_FOUND
    finally:
        plugin.unpublish(target, "cases")
        plugin.unstage(staging, "cases")
        plugin.unstage(other, "cases-v2")
    assert mounts_under(csi_env.root / "plugins") == []


def test_every_publish_of_a_staged_volume_checks_its_own_pod(plugin: Plugin, csi_env: CsiEnv) -> None:
    from datahub.catalog import open_catalog

    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("staged-private", acl={"system:serviceaccount:team-a:trainer": "reader"})
    finally:
        catalog.close()
    csi_env.commit("staged-private", {"secret.txt": b"team a only"})
    staging = staging_path(csi_env, "acl")
    context = {"dataset": "staged-private", "version": "1"}
    plugin.stage(staging, context, volume_id="sacl")  # the kubelet names no pod at NodeStage
    allowed, denied = csi_env.target("sacl-a"), csi_env.target("sacl-b")
    try:
        plugin.publish(
            allowed, {**context, **pod_info("team-a", "trainer")}, volume_id="sacl", staging=staging
        )
        assert Path(allowed, "secret.txt").read_bytes() == b"team a only"
        for pod in (pod_info("team-b", "trainer"), {}):  # another service account; an unnamed pod
            with pytest.raises(grpc.RpcError) as err:
                plugin.publish(denied, {**context, **pod}, volume_id="sacl", staging=staging)
            # a dataset the pod may not read answers as a missing one (caller72)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()
            assert "staged-private" in err.value.details()
            assert not os.path.exists(denied)  # no bind mount of what another pod staged
        assert Path(allowed, "secret.txt").read_bytes() == b"team a only"
    finally:
        plugin.unpublish(allowed, "sacl")
        plugin.unstage(staging, "sacl")


def test_a_staged_workspace_has_one_writer_and_flushes_when_unstaged(plugin: Plugin, csi_env: CsiEnv) -> None:
    staging = staging_path(csi_env, "ws")
    context = {"workspace": "staged-ws", "commitTo": "staged-results"}
    plugin.stage(staging, context, volume_id="sws")
    first, second = csi_env.target("sws-1"), csi_env.target("sws-2")
    try:
        plugin.publish(first, context, volume_id="sws", staging=staging)
        Path(first, "ckpt.bin").write_bytes(b"checkpoint")
        with pytest.raises(grpc.RpcError) as err:  # one writer per workspace on a node
            plugin.publish(second, context, volume_id="sws", staging=staging)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and first in err.value.details()
        assert not os.path.exists(second)
        assert Path(first, "ckpt.bin").read_bytes() == b"checkpoint"
        plugin.unpublish(first, "sws")
        # the next pod on the node gets the workspace (with what the first one wrote)
        plugin.publish(second, context, volume_id="sws", staging=staging)
        assert Path(second, "ckpt.bin").read_bytes() == b"checkpoint"
    finally:
        plugin.unpublish(first, "sws")
        plugin.unpublish(second, "sws")
    plugin.unstage(staging, "sws")  # the daemon flushes and commits
    client = csi_env.endpoint.client()
    listed = client.list_objects_v2(Bucket=csi_env.bucket, Prefix="objects/workspaces/staged-ws/")
    assert [o["Key"].rsplit("/", 1)[-1] for o in listed.get("Contents", [])] == ["ckpt.bin"]
    from datahub.catalog import open_catalog

    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        assert [r.key for r in catalog.list_records("staged-results", None)] == ["ckpt.bin"]
    finally:
        catalog.close()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
