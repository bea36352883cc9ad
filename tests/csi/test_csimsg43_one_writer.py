"""Two pods on one node writing one workspace: the refusal names the first pod's volume (csimsg43).

Two pods publish the same inline workspace volume (or two volumes naming one workspace). The
second NodePublishVolume was rightly FAILED_PRECONDITION, but its message was the second mount
process's: "already open for writing by the mount at <the plugin's private mount point> ...
unmount it there first (`datahub umount <that path>`)". On a node that mount is the first
pod's volume, and an operator who followed the advice (from ``kubectl describe pod``) pulled
it from under that pod. The plugin now refuses before starting a mount process, naming the
volume, its target and its pod, and saying what to do in the cluster's terms; the first pod
keeps reading and writing, and once it is unpublished the kubelet's retry mounts the second.

Driven as the kubelet does: over the plugin's gRPC socket, real FUSE mounts on moto S3.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from csi.node import NodeService
from csi.volumes import VolumeSpec
from datahub.config import load_config
from datahub.errors import Conflict
from tests.csi.conftest import CsiEnv, Plugin, handed_clean, mounts_under
from tests.csi.test_csi14 import _forget, _gone, _restart, own_plugin
from tests.csi.test_restart import staging, target

pytestmark = pytest.mark.fuse
__all__ = ["own_plugin"]  # the fixture, used by name


def _pod(workspace: str, pod: str) -> dict[str, str]:
    """An inline workspace volume's context, with the pod info the kubelet adds (podInfoOnMount)."""
    return {
        "workspace": workspace,
        "csi.storage.k8s.io/ephemeral": "true",
        "csi.storage.k8s.io/pod.name": pod,
        "csi.storage.k8s.io/pod.namespace": "team-a",
        "csi.storage.k8s.io/pod.uid": f"uid-{pod}",
        "csi.storage.k8s.io/serviceAccount.name": "trainer",
    }


@pytest.fixture(scope="module")
def module_plugin(csi_env: CsiEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    plugin = Plugin(tmp_path_factory.mktemp("csimsg43"), csi_env.config_path, check_interval=3600)
    try:
        yield plugin.start()
    finally:
        plugin.teardown()


@pytest.fixture
def plugin(module_plugin: Plugin) -> Iterator[Plugin]:
    yield from handed_clean(module_plugin)


def _refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


@pytest.mark.parametrize("second_id", ["csi-pod-a", "csi-pod-b"], ids=["same-volume-id", "another-volume-id"])
def test_a_second_pod_writing_the_same_inline_workspace_is_told_which_pod_holds_it(
    plugin: Plugin, csi_env: CsiEnv, second_id: str
) -> None:
    workspace = f"scratch-{second_id}"
    first, second = csi_env.target(f"msg43-a-{second_id}"), csi_env.target(f"msg43-b-{second_id}")
    plugin.publish(first, _pod(workspace, "trainer-a"), volume_id="csi-pod-a")
    Path(first, "before.txt").write_bytes(b"a wrote this\n")

    err = _refused(lambda: plugin.publish(second, _pod(workspace, "trainer-b"), volume_id=second_id))
    details = err.details()
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, details
    assert "datahub umount" not in details and "volumes/" not in details, details  # no private path
    assert f"workspace 'team-a.{workspace}'" in details, details
    assert f"volume 'csi-pod-a', published on this node at {first} for pod team-a/trainer-a" in details, (
        details
    )
    assert "do not unmount it by hand" in details and "delete it" in details, details
    assert "another workspace name" in details, details
    assert [p["target_path"] for p in plugin.state()] == [first]
    assert mounts_under(Path(second).parent) == []

    # the first pod never noticed: it keeps reading and writing its volume
    assert Path(first, "before.txt").read_bytes() == b"a wrote this\n"
    Path(first, "after.txt").write_bytes(b"still writing\n")
    assert sorted(p.name for p in Path(first).iterdir()) == ["after.txt", "before.txt"]

    # what the message says to do: once that pod is gone, the kubelet's retry mounts this one
    plugin.unpublish(first, "csi-pod-a")
    plugin.publish(second, _pod(workspace, "trainer-b"), volume_id=second_id)
    assert Path(second, "after.txt").read_bytes() == b"still writing\n"
    plugin.unpublish(second, second_id)


def test_a_second_pv_naming_a_staged_workspace_is_told_which_volume_and_pod_hold_it(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    context = {"workspace": "msg43-staged"}
    stage = staging(plugin, "msg43-pv-a")
    pod = csi_env.target("msg43-pv-pod")
    plugin.stage(stage, context, volume_id="pvc-a")
    pod_info = {k: v for k, v in _pod("", "trainer-a").items() if k != "csi.storage.k8s.io/ephemeral"}
    plugin.publish(
        pod, {**context, **pod_info, "workspace": "msg43-staged"}, volume_id="pvc-a", staging=stage
    )
    Path(pod, "x.txt").write_bytes(b"x")

    other = staging(plugin, "msg43-pv-b")
    err = _refused(lambda: plugin.stage(other, context, volume_id="pvc-b"))
    details = err.details()
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, details
    assert "datahub umount" not in details and "volumes/" not in details, details
    assert f"volume 'pvc-a', staged on this node at {stage}" in details, details
    assert f"{pod} for pod team-a/trainer-a" in details, details
    assert Path(pod, "x.txt").read_bytes() == b"x"
    Path(pod, "y.txt").write_bytes(b"y")

    plugin.unpublish(pod, "pvc-a")
    plugin.unstage(stage, "pvc-a")


def test_two_publishes_at_once_of_one_workspace_refuse_the_second_before_its_mount(tmp_path: Path) -> None:
    """Neither is recorded yet while its mount process starts: the first one's reservation is what
    the second meets (without it, the second's mount process refused it, with the message above)."""
    node = NodeService(
        load_config(env={}, overrides={"home": str(tmp_path / "home")}), tmp_path / "state", "n"
    )
    spec = VolumeSpec("workspace", workspace="team-a.scratch")
    with node._sole_writer("csi-a", "/pods/a/mount", spec):
        with pytest.raises(Conflict) as err, node._sole_writer("csi-b", "/pods/b/mount", spec):
            pass
        message = str(err.value)
        assert "volume 'csi-a', being published on this node at /pods/a/mount right now" in message, message
        assert "datahub umount" not in message
        with node._sole_writer("csi-c", "/pods/c/mount", VolumeSpec("workspace", workspace="other")):
            pass  # another workspace is free
    with node._sole_writer("csi-b", "/pods/b/mount", spec):  # the first is done (recorded, or failed)
        pass


def test_a_pod_on_another_node_is_told_that_node_holds_the_workspace(
    plugin: Plugin, csi_env: CsiEnv, tmp_path: Path
) -> None:
    """Node B (a plugin with its own home and journal, the same catalog) publishes the workspace
    node A's pod writes: refused by A's writer lease, and the message says another node holds it."""
    root = tmp_path / "node-b"
    root.mkdir()
    config_b = root / "datahub.toml"
    text = csi_env.config_path.read_text()
    home_line = f'home = "{csi_env.root / "var"}"\n'
    assert home_line in text
    catalog = f'catalog_url = "{csi_env.config.resolved_catalog_url}"\n'
    config_b.write_text(text.replace(home_line, f'home = "{root / "var"}"\n' + catalog))
    node_b = Plugin(root, config_b, check_interval=3600)
    first, second = csi_env.target("msg43-node-a"), str(tmp_path / "pods" / "msg43-node-b" / "mount")
    Path(second).parent.mkdir(parents=True)
    try:
        node_b.start()
        plugin.publish(first, _pod("two-nodes", "trainer-a"), volume_id="csi-node-a")
        Path(first, "a.txt").write_bytes(b"a\n")
        err = _refused(lambda: node_b.publish(second, _pod("two-nodes", "trainer-b"), volume_id="csi-node-b"))
        details = err.details()
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, details
        assert "'team-a.two-nodes' is written by another node: host " in details, details
        assert "holds its writer lease" in details and "let that pod finish, or delete it" in details, details
        assert "datahub umount" not in details, details
        assert node_b.state() == [] and mounts_under(Path(second).parent) == []
        Path(first, "b.txt").write_bytes(b"b\n")  # node A's pod keeps writing
        assert Path(first, "a.txt").read_bytes() == b"a\n"
        plugin.unpublish(first, "csi-node-a")
        node_b.publish(second, _pod("two-nodes", "trainer-b"), volume_id="csi-node-b")  # the retry
        node_b.unpublish(second, "csi-node-b")
    finally:
        node_b.teardown()


def test_a_mount_process_a_crash_left_unrecorded_is_named_as_the_plugins_not_to_unmount(
    own_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """The plugin was killed between pod A's mount and its record: pod B's publish of the same
    workspace meets that unrecorded process, and is told so, with no private path to unmount."""
    plugin = own_plugin.start()
    first, second = target(plugin, "msg43-lost-a"), target(plugin, "msg43-lost-b")
    plugin.publish(first, _pod("lost", "trainer-a"), volume_id="csi-lost-a")
    Path(first, "kept.txt").write_bytes(b"acknowledged\n")
    [orphan] = [p["pid"] for p in plugin.state()]
    plugin.kill9()
    _forget(plugin, first)
    again = _restart(own_plugin)
    err = _refused(lambda: again.publish(second, _pod("lost", "trainer-b"), volume_id="csi-lost-b"))
    details = err.details()
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, details
    assert (
        f"is written by a mount process of this plugin that no volume's record names (pid {orphan}" in details
    )
    assert "datahub umount" not in details and "volumes/" not in details, details
    assert again.state() == [] and not _gone(orphan)
    again.unpublish(first, "csi-lost-a")  # the kubelet undoes the call the process was started for
    assert _gone(orphan)
    again.publish(second, _pod("lost", "trainer-b"), volume_id="csi-lost-b")
    assert Path(second, "kept.txt").read_bytes() == b"acknowledged\n"
    again.unpublish(second, "csi-lost-b")
