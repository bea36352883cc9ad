"""The node plugin's volume lifecycle driven as a misbehaving (or crashing) kubelet would.

Out-of-order and repeated calls, target paths that are symlinks or lie inside another
volume, and a plugin killed between a mount and the state write that records it. Real
plugin over its socket, real FUSE and bind mounts on moto S3.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from fuse_adapter.daemon import is_mounted
from tests.csi.conftest import CsiEnv, Plugin, _cmdline_mentions, handed_clean, mounts_under
from tests.csi.test_restart import _serves_v1, _zombie, staging, target
from tests.csi.test_stage import code_of, fuse_daemons, fuse_mounts

pytestmark = pytest.mark.fuse

V1 = {"dataset": "imgs", "version": "1"}


@pytest.fixture
def own_plugin(csi_env: CsiEnv, tmp_path: Path) -> Iterator[Plugin]:
    """A plugin of this test's own (state dir, socket, paths under tmp_path); no periodic pass."""
    plugin = Plugin(tmp_path, csi_env.config_path, check_interval=3600)
    try:
        yield plugin
    finally:
        plugin.teardown()
        for pid in _processes_under(tmp_path):  # a mount process no record names (the crash tests)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def quiet_module_plugin(csi_env: CsiEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    """One plugin with no periodic pass for the module's tests that never kill nor restart it."""
    root = tmp_path_factory.mktemp("csi14-quiet")
    plugin = Plugin(root, csi_env.config_path, check_interval=3600)
    try:
        yield plugin.start()
    finally:
        plugin.teardown()
        for pid in _processes_under(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def quiet_plugin(quiet_module_plugin: Plugin) -> Iterator[Plugin]:
    """``quiet_module_plugin``, started, with nothing published before and after the test."""
    yield from handed_clean(quiet_module_plugin)


def _processes_under(root: Path) -> list[int]:
    """Live processes whose command line names a path under ``root`` (this test's own)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and _cmdline_mentions(int(entry), str(root) + "/"):
            found.append(int(entry))
    return found


def _forget(plugin: Plugin, path: str) -> None:
    """Leave the state file as a SIGKILL between the mount and its state write leaves it: the
    mount is there, the record of ``path`` is not (the plugin must be stopped)."""
    state_file = plugin.state_dir / "published.json"
    doc = json.loads(state_file.read_text())
    doc["published"] = [p for p in doc["published"] if p["target_path"] != path]
    state_file.write_text(json.dumps(doc))


def _refused(plugin: Plugin, *paths: str, context: dict[str, str] = V1, volume_id: str = "in") -> None:
    """NodePublishVolume and NodeStageVolume at each of ``paths`` answer FAILED_PRECONDITION."""
    for path in paths:
        for call in (plugin.publish, plugin.stage):
            code = code_of(lambda c=call, p=path: c(p, context, volume_id=volume_id))
            assert code == grpc.StatusCode.FAILED_PRECONDITION, (call.__name__, path)


def _restart(own_plugin: Plugin) -> Plugin:
    restarted = Plugin(own_plugin.root, own_plugin.config_path, check_interval=3600).start()
    own_plugin.proc, own_plugin.channel = restarted.proc, restarted.channel  # teardown stops this one
    return restarted


def _gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}/cmdline") or _zombie(pid)


@pytest.mark.parametrize("bound", [True, False], ids=["after-bind", "before-bind"])
def test_a_stage_whose_record_a_crash_lost_is_staged_again_with_one_daemon(
    own_plugin: Plugin, csi_env: CsiEnv, bound: bool
) -> None:
    plugin = own_plugin.start()
    stage = staging(plugin, "lost-stage")
    plugin.stage(stage, V1, volume_id="lost")
    [orphan] = [p["pid"] for p in plugin.state() if p.get("staged")]
    plugin.kill9()  # between the mount (done) and the state write (never happened)
    _forget(plugin, stage)
    if not bound:  # killed even before the bind: the process serves its private dir only
        subprocess.run(["umount", stage], check=True)
    again = _restart(own_plugin)
    again.stage(stage, V1, volume_id="lost")  # the kubelet retries the stage it never saw succeed
    [record] = [p for p in again.state() if p.get("staged")]
    assert _gone(orphan) and record["pid"] not in (0, orphan)  # the unrecorded daemon does not linger
    assert len(fuse_daemons(again)) == 1 and len(fuse_mounts(again)) == 1
    pod = target(again, "lost-stage-pod")
    again.publish(pod, V1, volume_id="lost", staging=stage)
    assert _serves_v1(csi_env, stage, pod)
    again.unpublish(pod, "lost")
    again.unstage(stage, "lost")
    assert mounts_under(again.root) == []


def test_a_publish_whose_record_a_crash_lost_is_published_again(own_plugin: Plugin, csi_env: CsiEnv) -> None:
    plugin = own_plugin.start()
    stage, pod = staging(plugin, "lost-bind"), target(plugin, "lost-bind-pod")
    plugin.stage(stage, V1, volume_id="lost")
    plugin.publish(pod, V1, volume_id="lost", staging=stage)
    daemon = fuse_daemons(plugin).pop()
    plugin.kill9()  # between the bind (done) and the state write (never happened)
    _forget(plugin, pod)
    again = _restart(own_plugin)
    again.publish(pod, V1, volume_id="lost", staging=stage)  # the kubelet's retry
    assert [p["target_path"] for p in again.state() if p.get("staging_path") == stage] == [pod]
    assert _serves_v1(csi_env, pod)
    assert mounts_under(Path(pod).parent) == [pod]  # one bind, not two stacked
    # the next pod after the restart shares the adopted daemon
    second = target(again, "lost-bind-second")
    again.publish(second, V1, volume_id="lost", staging=stage)
    assert fuse_daemons(again) == {daemon} and _serves_v1(csi_env, second)
    for path in (pod, second):
        again.unpublish(path, "lost")
        assert mounts_under(Path(path).parent) == []
    again.unstage(stage, "lost")


def test_an_inline_publish_whose_record_a_crash_lost_is_published_again(
    own_plugin: Plugin, csi_env: CsiEnv
) -> None:
    plugin = own_plugin.start()
    pod = target(plugin, "lost-inline")
    plugin.publish(pod, V1, volume_id="lost")
    [orphan] = [p["pid"] for p in plugin.state()]
    plugin.kill9()
    _forget(plugin, pod)
    again = _restart(own_plugin)
    again.publish(pod, V1, volume_id="lost")
    [record] = again.state()
    assert _gone(orphan) and record["pid"] not in (0, orphan)
    assert _serves_v1(csi_env, pod) and len(fuse_mounts(again)) == 1
    again.unpublish(pod, "lost")
    assert mounts_under(again.root) == []


def test_a_target_that_is_a_symlink_is_refused_and_the_volume_it_names_is_untouched(
    quiet_plugin: Plugin, csi_env: CsiEnv
) -> None:
    plugin = quiet_plugin
    pod_a, pod_b = target(plugin, "link-a"), target(plugin, "link-b")
    plugin.publish(pod_a, V1, volume_id="a")
    os.symlink(pod_a, pod_b)  # pod b's target names pod a's volume
    stage = staging(plugin, "link-stage")
    os.rmdir(stage)
    os.symlink(pod_a, stage)
    _refused(plugin, pod_b, stage, context={"dataset": "imgs", "version": "2"}, volume_id="b")
    assert Path(pod_a, "README").read_bytes() == b"v1\n"  # nothing stacked on pod a's volume
    assert mounts_under(plugin.root / "pods") == [pod_a]
    assert [p["target_path"] for p in plugin.state()] == [pod_a]
    # the same request as pod a's, through the link, is not pod a's publish either: unpublishing
    # the link must not take pod a's volume away
    assert code_of(lambda: plugin.publish(pod_b, V1, volume_id="a")) == grpc.StatusCode.FAILED_PRECONDITION
    plugin.unpublish(pod_b, "a")
    assert Path(pod_a, "README").read_bytes() == b"v1\n"
    plugin.unpublish(pod_a, "a")
    assert mounts_under(plugin.root) == []


def test_a_target_inside_another_volume_is_refused_and_writes_nothing_there(
    quiet_plugin: Plugin, csi_env: CsiEnv
) -> None:
    plugin = quiet_plugin
    ws = target(plugin, "outer-ws")
    plugin.publish(ws, {"workspace": "csi14-outer"}, volume_id="ws")
    inner = os.path.join(ws, "inner")
    _refused(plugin, inner)
    assert os.listdir(ws) == []  # no directory made in the pod's workspace (it would be flushed)
    stage = os.path.join(ws, "stage")
    _refused(plugin, stage)
    # nor one holding a volume below it, nor one inside the plugin's own state dir
    parent = str(plugin.root / "pods")
    private = str(plugin.state_dir / "volumes")
    a_file = target(plugin, "a-file")
    Path(a_file).write_bytes(b"not a directory")  # was INTERNAL (a traceback: makedirs' EEXIST)
    _refused(plugin, parent, private, a_file)
    assert Path(a_file).read_bytes() == b"not a directory"
    assert os.listdir(ws) == [] and [p["target_path"] for p in plugin.state()] == [ws]
    plugin.unpublish(ws, "ws")
    assert mounts_under(plugin.root) == []


def test_a_mount_the_plugin_did_not_make_is_still_refused_and_left_alone(
    quiet_plugin: Plugin, csi_env: CsiEnv
) -> None:
    plugin = quiet_plugin
    pod, stage = target(plugin, "tmpfs-pod"), staging(plugin, "tmpfs-stage")
    for path in (pod, stage):
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", path], check=True)
        Path(path, "precious").write_bytes(b"keep me")
    try:
        _refused(plugin, pod, stage)
        for path in (pod, stage):
            assert Path(path, "precious").read_bytes() == b"keep me"
        assert plugin.state() == [] and fuse_mounts(plugin) == []
    finally:
        for path in (pod, stage):
            subprocess.run(["umount", path], check=True)


def test_one_workspace_staged_at_two_staging_paths_still_has_one_writer(
    quiet_plugin: Plugin, csi_env: CsiEnv
) -> None:
    plugin = quiet_plugin
    first, second = staging(plugin, "ws-one"), staging(plugin, "ws-two")
    context = {"workspace": "csi14-two-stages"}
    plugin.stage(first, context, volume_id="ws")
    # the same volume (or another volume id naming the same workspace) at a second staging path
    for volume_id in ("ws", "ws-again"):
        err = code_of(lambda v=volume_id: plugin.stage(second, context, volume_id=v))
        assert err == grpc.StatusCode.FAILED_PRECONDITION
    assert [p["target_path"] for p in plugin.state()] == [first] and len(fuse_mounts(plugin)) == 1
    # a staged but unpublished volume answers NodeGetVolumeStats, healthy, with its usage
    stats = plugin.stats(first, "ws")
    assert not stats.volume_condition.abnormal and stats.usage
    assert code_of(lambda: plugin.stats(second, "ws")) == grpc.StatusCode.NOT_FOUND
    # two pods asking the stage for different read-only flags: the writer rule holds either way
    pod_rw, pod_ro = target(plugin, "ws-rw"), target(plugin, "ws-ro")
    plugin.publish(pod_ro, context, volume_id="ws", staging=first, readonly=True)
    with pytest.raises(OSError):
        Path(pod_ro, "x").write_bytes(b"x")
    assert code_of(lambda: plugin.publish(pod_rw, context, volume_id="ws", staging=first)) == (
        grpc.StatusCode.FAILED_PRECONDITION
    )
    plugin.unpublish(pod_ro, "ws")
    plugin.unstage(first, "ws")
    assert mounts_under(plugin.root) == []


def test_one_workspace_staged_on_two_nodes_sharing_a_catalog_has_one_writer(
    own_plugin: Plugin, csi_env: CsiEnv, tmp_path: Path
) -> None:
    """Reproduction: node A and node B (two plugins, each with its own home, state dir and
    journal, one catalog and one objects bucket) stage the same workspace PV; both succeed,
    both pods write ``out.txt``, and at unstage each node flushes its own copy to
    ``objects/workspaces/<name>/out.txt``: the last flush wins, the other pod's acknowledged
    (closed, fsynced) file is gone without an error anywhere."""
    node_b_root = tmp_path / "node-b"
    node_b_root.mkdir()
    config_b = node_b_root / "datahub.toml"
    text = csi_env.config_path.read_text()
    home_line = f'home = "{csi_env.root / "var"}"\n'
    assert home_line in text
    catalog = f'catalog_url = "{csi_env.config.resolved_catalog_url}"\n'
    config_b.write_text(text.replace(home_line, f'home = "{node_b_root / "var"}"\n' + catalog))
    node_a = own_plugin.start()
    node_b = Plugin(node_b_root, config_b, check_interval=3600)
    context = {"workspace": "csi14-two-nodes"}
    try:
        node_b.start()
        stage_a, stage_b = staging(node_a, "ws"), staging(node_b, "ws")
        node_a.stage(stage_a, context, volume_id="pvc-two-nodes")
        assert code_of(lambda: node_b.stage(stage_b, context, volume_id="pvc-two-nodes")) == (
            grpc.StatusCode.FAILED_PRECONDITION
        )
    finally:
        node_b.teardown()


def test_unstage_and_unpublish_after_a_crash_lost_the_record_stop_the_unrecorded_process(
    own_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """The kubelet treats the dropped connection as "uncertain" and, once the pod is gone, calls
    NodeUnstage / NodeUnpublish instead of retrying: the process must not run on unseen."""
    plugin = own_plugin.start()
    stage, pod = staging(plugin, "gone-stage"), target(plugin, "gone-inline")
    plugin.stage(stage, V1, volume_id="gone")
    plugin.publish(pod, {"workspace": "csi14-gone"}, volume_id="gone-ws")
    Path(pod, "kept.txt").write_bytes(b"acknowledged")
    orphans = [p["pid"] for p in plugin.state()]
    plugin.kill9()
    _forget(plugin, stage)
    _forget(plugin, pod)
    again = _restart(own_plugin)
    again.unstage(stage, "gone")
    again.unpublish(pod, "gone-ws")
    assert all(_gone(pid) for pid in orphans)
    assert fuse_mounts(again) == [] and mounts_under(again.root) == []
    assert os.listdir(again.state_dir / "volumes") == []  # no config (with its secrets) left behind
    listed = csi_env.endpoint.client().list_objects_v2(
        Bucket=csi_env.bucket, Prefix="objects/workspaces/csi14-gone/"
    )
    assert [o["Key"].rsplit("/", 1)[-1] for o in listed.get("Contents", [])] == ["kept.txt"]  # flushed


@pytest.mark.parametrize("staged", [False, True], ids=["inline", "staged"])
def test_writes_while_a_dead_workspace_is_repaired_reach_the_workspace(
    own_plugin: Plugin, csi_env: CsiEnv, staged: bool
) -> None:
    """Publish a workspace (inline, or bound from its stage), SIGKILL its mount process, and
    while the supervisor repairs it keep writing ``late.txt`` into the target (the path a
    propagating container sees). The target must never be the node's plain directory: a
    write there succeeded and was hidden by the new bind (lost, and NodeUnpublish then failed
    on the non-empty directory). A write during the repair fails (the dead mount) or reaches
    the workspace."""
    from tests.csi.test_publish import read_tree

    own_plugin.check_interval = 0.5
    plugin = own_plugin.start()
    pod, stage = target(plugin, "repaired-ws"), staging(plugin, "repaired-stage")
    context = {"workspace": "csi14-repaired"}
    if staged:
        plugin.stage(stage, context, volume_id="ws")
    plugin.publish(pod, context, volume_id="ws", **({"staging": stage} if staged else {}))
    [killed] = [p["pid"] for p in plugin.state() if p.get("pid")]
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while _serves(pod) and time.monotonic() < deadline:  # until the kernel ends the connection
        time.sleep(0.005)
    refused, bare = 0, 0
    while time.monotonic() < deadline and not _serves(pod):
        try:
            Path(pod, "late.txt").write_bytes(b"written during the repair")
        except OSError:
            refused += 1
        if not is_mounted(pod):
            bare += 1
        time.sleep(0)  # no pause: a staged target is bare only between two commands
    assert _serves(pod) and refused, "the dead mount was never seen, or never repaired"
    assert bare == 0, f"the target was the node's plain directory during the repair ({bare} looks)"
    while [p["pid"] for p in plugin.state() if p.get("pid")] == [killed] and time.monotonic() < deadline:
        time.sleep(0.05)  # the new pid is recorded just after the new view is in place
    assert [p["pid"] for p in plugin.state() if p.get("pid")] not in ([], [killed])
    if "late.txt" not in os.listdir(pod):  # every write during the repair was refused: write now
        Path(pod, "late.txt").write_bytes(b"written during the repair")
    assert read_tree(pod).get("late.txt") == b"written during the repair"
    plugin.unpublish(pod, "ws")  # nothing hidden under the target: its directory is removed
    assert not os.path.exists(pod)
    if staged:
        plugin.unstage(stage, "ws")
    assert mounts_under(plugin.root) == []
    listed = csi_env.endpoint.client().list_objects_v2(
        Bucket=csi_env.bucket, Prefix="objects/workspaces/csi14-repaired/"
    )
    assert [o["Key"].rsplit("/", 1)[-1] for o in listed.get("Contents", [])] == ["late.txt"]


def test_a_propagating_container_sees_the_repaired_workspace_and_no_dead_mount(
    own_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """The repair swaps the dead view for the new one beneath it; a container whose mount of
    the pods dir is a slave of the node's (HostToContainer: here ``unshare --propagation
    slave``) must get the same swap: one mount at the target, the new one, serving."""
    own_plugin.check_interval = 0.5
    plugin = own_plugin.start()
    pods = plugin.root / "pods"
    pods.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "pods", str(pods)], check=True)
    subprocess.run(["mount", "--make-shared", str(pods)], check=True)  # as the kubelet's pods dir
    container = subprocess.Popen(["unshare", "-m", "--propagation", "slave", "sleep", "300"])
    try:
        while Path(f"/proc/{container.pid}/comm").read_text().strip() != "sleep":
            time.sleep(0.01)  # until unshare has made the slave namespace and runs sleep in it
        assert os.readlink(f"/proc/{container.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        pod = target(plugin, "propagated-ws")
        plugin.publish(pod, {"workspace": "csi14-propagated"}, volume_id="ws")
        Path(pod, "before.txt").write_bytes(b"acknowledged")
        _in(container, ["test", "-f", f"{pod}/before.txt"])  # the bind propagated
        [killed] = [p["pid"] for p in plugin.state()]
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while [p["pid"] for p in plugin.state()] == [killed] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _serves(pod)
        assert _in(container, ["cat", f"{pod}/before.txt"]) == "acknowledged"  # replayed, seen there
        _in(container, ["sh", "-c", f"echo x > {pod}/after.txt"])
        assert Path(pod, "after.txt").read_bytes() == b"x\n"  # written in the container: in the workspace
        seen = _in(container, ["cat", "/proc/self/mountinfo"]).split("\n")
        assert [line.split()[4] for line in seen if line].count(pod) == 1  # the dead one is gone there too
        plugin.unpublish(pod, "ws")
        assert not os.path.exists(pod)
    finally:
        container.kill()
        container.wait()


def _in(container: subprocess.Popen, cmd: list[str]) -> str:
    """Run ``cmd`` in the mount namespace of ``container``; its output."""
    done = subprocess.run(["nsenter", "-t", str(container.pid), "-m", *cmd], capture_output=True, text=True)
    assert done.returncode == 0, (cmd, done.stderr)
    return done.stdout


def _serves(path: str) -> bool:
    try:
        os.statvfs(path)
    except OSError:
        return False
    return is_mounted(path)
