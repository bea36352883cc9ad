"""review24: a publish from a stage is checked against the stage as it is under the stage's lock.

* A read-write NodePublishVolume of a workspace staged with a reader-only access mode was
  bound read-only without a word: the kubelet reported the volume mounted as asked, and the
  pod's first write failed (EROFS). It is FAILED_PRECONDITION naming the volume, the staging
  path and what to do; a read-only publish of that stage is still served.
* The stage's record was checked (volume id, attributes) before its lock was taken and only
  looked up again under it: an unstage and a NodeStageVolume of another volume at the same
  staging path in between, and the target was bound from that other volume.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import grpc
import pytest

from csi import node as node_module
from csi.node import NodeService, PublishRequest, _fingerprint
from csi.state import Published
from csi.volumes import Capability, VolumeSpec
from datahub.config import load_config
from datahub.errors import Conflict, NotFound
from tests.csi.conftest import CsiEnv, Mode, Plugin, wait_for_checks
from tests.csi.test_stage import code_of, staging_path


@pytest.mark.fuse
def test_a_read_write_publish_of_a_workspace_staged_read_only_is_refused(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    staging = staging_path(csi_env, "r24-ro")
    context = {"workspace": "review24-ro"}
    plugin.stage(staging, context, volume_id="r24", mode=Mode.SINGLE_NODE_READER_ONLY)
    target = csi_env.target("r24-rw")
    try:
        with pytest.raises(grpc.RpcError) as err:  # a writer access mode, readonly false: as kubelet sends
            plugin.publish(target, context, volume_id="r24", staging=staging, mode=Mode.SINGLE_NODE_WRITER)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        details = err.value.details()
        assert "'r24'" in details and staging in details and "read-only" in details
        assert not os.path.exists(target)  # nothing bound, nothing recorded
        assert [p for p in plugin.state() if p["target_path"] == target] == []

        # read-only publishes of it are served, read-only: the flag, or a reader-only access mode
        for how in (
            {"readonly": True, "mode": Mode.SINGLE_NODE_WRITER},
            {"mode": Mode.SINGLE_NODE_READER_ONLY},
        ):
            plugin.publish(target, context, volume_id="r24", staging=staging, **how)
            with pytest.raises(OSError) as exc:
                Path(target, "x").write_bytes(b"x")
            assert exc.value.errno == errno.EROFS
            # asked read-write again for the published target: a different request
            assert (
                code_of(lambda: plugin.publish(target, context, volume_id="r24", staging=staging))
                == grpc.StatusCode.ALREADY_EXISTS
            )
            plugin.unpublish(target, "r24")
            assert not os.path.exists(target)
    finally:
        plugin.unpublish(target, "r24")
        plugin.unstage(staging, "r24")


def _stage_record(tmp_path: Path, staging: str, volume_id: str, dataset: str) -> Published:
    context = {"dataset": dataset, "version": "1"}
    cap = Capability("mount", "SINGLE_NODE_READER_ONLY")
    return Published(
        target_path=staging,
        volume_id=volume_id,
        spec=VolumeSpec("dataset", dataset=dataset, version="1"),
        readonly=True,
        fingerprint=_fingerprint(volume_id, context, cap, True, "", stage=True),
        sources=[f"{dataset}@1"],
        subdir=f"{dataset}/v1",
        volume_dir=str(tmp_path / "state" / "volumes" / volume_id),
        resolved=f"{dataset}@v1",
        extra={"context": context},
        staged=True,
    )


def test_a_publish_checks_the_stage_again_under_its_lock(tmp_path: Path, monkeypatch) -> None:
    """The publish passes the first check of stage ``vol-a``, then waits for the stage's lock,
    held by an unstage that leaves ``vol-b`` staged at that path: refused (NOT_FOUND, naming
    both), never bound from ``vol-b``."""
    node = NodeService(
        load_config(env={}, overrides={"home": str(tmp_path / "home")}),
        tmp_path / "state",
        "n",
        kubelet_dir=tmp_path,
    )
    staging = str(tmp_path / "plugins" / "pv" / "globalmount")
    target = str(tmp_path / "pods" / "a" / "mount")
    os.makedirs(os.path.dirname(target))
    node._put(_stage_record(tmp_path, staging, "vol-a", "imgs"), staging)

    waiting, release = threading.Event(), threading.Event()
    original = node._target

    def target_lock(path: str, *, wait: float = 0.0):  # the publish is about to wait for the stage
        if path == staging and threading.current_thread().name == "publish":
            waiting.set()
        return original(path, wait=wait)

    monkeypatch.setattr(node, "_target", target_lock)
    monkeypatch.setattr(node_module, "STAGE_WAIT", 30.0)

    def unstage_and_stage_another() -> None:
        with original(staging):
            release.set()
            assert waiting.wait(30)
            node._put(None, staging)  # NodeUnstageVolume of vol-a, NodeStageVolume of vol-b
            node._put(_stage_record(tmp_path, staging, "vol-b", "other"), staging)

    outcome: list[BaseException | None] = []

    def publish() -> None:
        request = PublishRequest(
            "vol-a",
            target,
            Capability("mount", "SINGLE_NODE_READER_ONLY"),
            context={"dataset": "imgs", "version": "1"},
            staging_target_path=staging,
        )
        try:
            node.publish(request)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    holder = threading.Thread(target=unstage_and_stage_another)
    holder.start()
    assert release.wait(30)
    publisher = threading.Thread(target=publish, name="publish")
    publisher.start()
    publisher.join(60)
    holder.join(60)
    [error] = outcome
    assert isinstance(error, NotFound), repr(error)
    assert "'vol-b'" in str(error) and "'vol-a'" in str(error) and staging in str(error)
    assert not os.path.exists(target) and node._get(target) is None


@pytest.mark.fuse
def test_an_unpublish_or_unstage_naming_the_plugins_own_mount_leaves_it_serving(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    """NodeUnpublishVolume (or NodeUnstageVolume) of ``<state>/volumes/<key>/mnt``, a live
    stage's FUSE mount: "a mount of ours" and no record, so it was unmounted, and the
    supervisor then killed the stage's process and remounted it under every pod reading it.
    Nothing is ever published there (the path lies in the state dir), so nothing is undone."""
    staging = staging_path(csi_env, "r24-own")
    context = {"dataset": "imgs", "version": "1"}
    plugin.stage(staging, context, volume_id="r24-own", mode=Mode.MULTI_NODE_READER_ONLY)
    target = csi_env.target("r24-own")
    try:
        plugin.publish(
            target, context, volume_id="r24-own", staging=staging, mode=Mode.MULTI_NODE_READER_ONLY
        )
        [stage] = [p for p in plugin.state() if p["target_path"] == staging]
        fuse_mount, pid = os.path.join(stage["volume_dir"], "mnt"), stage["pid"]
        state_dir = str(plugin.state_dir.resolve())
        for path in (fuse_mount, stage["volume_dir"], state_dir):
            plugin.unpublish(path, "r24-own")
            plugin.unstage(path, "r24-own")
        assert os.path.ismount(fuse_mount) and os.path.isdir(state_dir)
        assert Path(target, "README").read_bytes() == b"v1\n"
        wait_for_checks(plugin, 2)  # the supervisor finds nothing to repair
        [stage] = [p for p in plugin.state() if p["target_path"] == staging]
        assert stage["pid"] == pid and os.path.exists(f"/proc/{pid}")
        assert Path(target, "train", "b.bin").read_bytes() == csi_env.files[1]["train/b.bin"]
    finally:
        plugin.unpublish(target, "r24-own")
        plugin.unstage(staging, "r24-own")


@pytest.mark.fuse
def test_an_unpublish_naming_a_directory_inside_a_pods_workspace_leaves_it(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    """An empty directory a pod made in its workspace, named by a NodeUnpublishVolume: it was
    never a target (publish refuses paths inside another volume), yet it was removed."""
    target = csi_env.target("r24-ws")
    context = {"workspace": "review24-inner"}
    plugin.publish(target, context, volume_id="r24-ws")
    try:
        inner = Path(target, "checkpoints")
        inner.mkdir()
        plugin.unpublish(str(inner), "r24-ws")
        assert inner.is_dir()
    finally:
        plugin.unpublish(target, "r24-ws")


@pytest.mark.fuse
def test_the_state_dir_itself_is_no_target_nor_staging_path(plugin: Plugin, csi_env: CsiEnv) -> None:
    """A bind onto the state dir covered published.json and every volume's FUSE mount point."""
    state_dir = str(plugin.state_dir.resolve())
    context = {"dataset": "imgs", "version": "1"}
    for call in (
        lambda: plugin.publish(state_dir, context, volume_id="r24-state"),
        lambda: plugin.stage(state_dir, context, volume_id="r24-state"),
    ):
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        assert "state dir" in err.value.details() and "'r24-state'" in err.value.details()
        assert not os.path.ismount(state_dir)
        assert [p for p in plugin.state() if p["volume_id"] == "r24-state"] == []


def test_a_volume_id_with_a_control_character_is_refused_before_anything_is_logged_or_mounted(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    """The plugin logs volume ids as given (``published %s ...``): one holding a newline wrote
    a line of the caller's making into the log."""
    forged = "vol\n2026-12-01 00:00:00,000 INFO csi.node: published vol-ok (imgs@v1) at /x"
    target, staging = csi_env.target("r24-id"), staging_path(csi_env, "r24-id")
    context = {"dataset": "imgs", "version": "1"}
    for volume_id in (forged, "vol\x1b[2J", "vol\x85"):
        for call in (
            lambda v=volume_id: plugin.publish(target, context, volume_id=v),
            lambda v=volume_id: plugin.stage(staging, context, volume_id=v),
        ):
            with pytest.raises(grpc.RpcError) as err:
                call()
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
            assert "control character" in err.value.details()
    assert not os.path.exists(target) and not os.path.ismount(staging)
    assert [p for p in plugin.state() if p["volume_id"].startswith("vol")] == []
    lines = plugin.log_path.read_text(errors="replace").splitlines()
    assert not any(line.startswith("2026-12-01 00:00:00,000 INFO csi.node") for line in lines)


@pytest.mark.parametrize("first", ["outer", "inner"])
def test_two_publishes_of_nested_targets_at_once_never_both_mount(
    tmp_path: Path, monkeypatch, first: str
) -> None:
    """A target inside (or above) another is refused (csi14), but only against recorded paths:
    two publishes at once, each checked before the other was recorded, both mounted, one of
    them inside the other's volume (created among a workspace's files, or hidden under its
    bind). A path being published counts from its check on."""
    node = NodeService(
        load_config(env={}, overrides={"home": str(tmp_path / "home")}),
        tmp_path / "state",
        "n",
        kubelet_dir=tmp_path,
    )
    paths = {"outer": str(tmp_path / "pods" / "a" / "mount")}
    paths["inner"] = os.path.join(paths["outer"], "sub")
    os.makedirs(paths["inner"])
    entered, release = threading.Event(), threading.Event()

    def mount_new(volume_id, path, spec, readonly, fingerprint, overrides, principal, extra, *, staged=False):
        assert not entered.is_set(), f"the publish at {path} was mounted while another was under way"
        entered.set()  # the mount work of the first publish, under way until released
        assert release.wait(30)
        record = Published(
            path, volume_id, spec, readonly, fingerprint, [], "", str(tmp_path / "v"), extra=extra
        )
        node._put(record, path)

    monkeypatch.setattr(node, "_mount_new", mount_new)

    def request(which: str) -> PublishRequest:
        cap = Capability("mount", "SINGLE_NODE_READER_ONLY")
        return PublishRequest(f"vol-{which}", paths[which], cap, context={"dataset": "imgs", "version": "1"})

    second = "inner" if first == "outer" else "outer"
    worker = threading.Thread(target=node.publish, args=(request(first),))
    worker.start()
    try:
        assert entered.wait(30)
        with pytest.raises(Conflict) as err:
            node.publish(request(second))
        assert paths[first] in str(err.value) and "'vol-" + second + "'" in str(err.value)
    finally:
        release.set()
        worker.join(30)
    assert [p.target_path for p in node.published()] == [paths[first]]
    assert node._claimed == set()  # released with the record written


def test_a_publish_that_fails_leaves_its_path_unclaimed(tmp_path: Path, monkeypatch) -> None:
    node = NodeService(
        load_config(env={}, overrides={"home": str(tmp_path / "home")}),
        tmp_path / "state",
        "n",
        kubelet_dir=tmp_path,
    )
    target = str(tmp_path / "pods" / "b" / "mount")
    os.makedirs(os.path.dirname(target))

    def mount_new(*args, **kwargs) -> None:
        raise NotFound("the version is gone")

    monkeypatch.setattr(node, "_mount_new", mount_new)
    cap = Capability("mount", "SINGLE_NODE_READER_ONLY")
    for path in (target, os.path.join(target, "sub")):  # the second is not refused as inside the first
        with pytest.raises(NotFound, match="the version is gone"):
            node.publish(PublishRequest("v", path, cap, context={"dataset": "imgs", "version": "1"}))
        assert node._claimed == set() and node.published() == []
