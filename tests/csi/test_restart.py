"""Restart recovery: mounts whose daemon died (ENOTCONN) are found from the state file and remounted."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fuse_adapter.daemon import DEAD_DAEMON_ERRNOS
from tests.csi.conftest import CsiEnv, Plugin, wait_until

pytestmark = [pytest.mark.fuse, pytest.mark.slow]


@pytest.fixture
def own_plugin(csi_env: CsiEnv, tmp_path: Path) -> Iterator[Plugin]:
    """A plugin of this test's own (state dir, socket, targets under tmp_path)."""
    plugin = Plugin(tmp_path, csi_env.config_path, check_interval=3600)  # only the start-up pass
    try:
        yield plugin
    finally:
        plugin.teardown()


def target(plugin: Plugin, name: str) -> str:
    parent = plugin.root / "pods" / name
    parent.mkdir(parents=True, exist_ok=True)
    return str(parent / "mount")


def assert_enotconn(path: str) -> None:
    with pytest.raises(OSError) as exc:
        os.listdir(path)
    # "Transport endpoint is not connected" (or ECONNABORTED for a connection aborted
    # mid-request, ECANCELED for a request handed to a dead daemon's io_uring queue)
    assert exc.value.errno in DEAD_DAEMON_ERRNOS


def test_kill_9_of_plugin_and_mount_processes_then_restart_serves_again(
    own_plugin: Plugin, csi_env: CsiEnv
) -> None:
    plugin = own_plugin.start()
    ds, ws = target(plugin, "ds"), target(plugin, "ws")
    plugin.publish(ds, {"dataset": "imgs", "version": "1"}, volume_id="ds")
    plugin.publish(ws, {"workspace": "crash-1"}, volume_id="ws")
    Path(ws, "out.txt").write_bytes(b"acknowledged")  # close() returns once durable + journaled
    pids = {p["target_path"]: p["pid"] for p in plugin.state()}
    assert all(pids.values())

    plugin.kill9()
    for pid in pids.values():
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: all(not os.path.exists(f"/proc/{pid}/cmdline") or _zombie(pid) for pid in pids.values()),
               30, "mount processes gone")  # fmt: skip
    assert_enotconn(ds)
    assert_enotconn(ws)

    restarted = Plugin(plugin.root, plugin.config_path, check_interval=3600).start()  # ready after the check
    own_plugin.proc, own_plugin.channel = restarted.proc, restarted.channel  # teardown stops this one
    assert Path(ds, "README").read_bytes() == b"v1\n"
    assert Path(ds, "train", "a.bin").read_bytes() == csi_env.files[1]["train/a.bin"]
    assert Path(ws, "out.txt").read_bytes() == b"acknowledged"
    Path(ws, "after.txt").write_bytes(b"still writable")
    new_pids = {p["target_path"]: p["pid"] for p in restarted.state()}
    assert set(new_pids) == set(pids) and not set(new_pids.values()) & set(pids.values())
    # the same publish again is still a no-op, and unpublishing flushes what the pod wrote
    restarted.publish(ds, {"dataset": "imgs", "version": "1"}, volume_id="ds")
    restarted.unpublish(ds, "ds")
    restarted.unpublish(ws, "ws")
    client = csi_env.endpoint.client()
    listed = client.list_objects_v2(Bucket=csi_env.bucket, Prefix="objects/workspaces/crash-1/")
    keys = sorted(o["Key"].rsplit("/", 1)[-1] for o in listed.get("Contents", []))
    assert keys == ["after.txt", "out.txt"]


def test_supervisor_remounts_a_volume_whose_mount_process_died(own_plugin: Plugin, csi_env: CsiEnv) -> None:
    own_plugin.check_interval = 0.5
    plugin = own_plugin.start()
    ds = target(plugin, "ds")
    plugin.publish(ds, {"dataset": "imgs", "version": "2"}, volume_id="ds")
    [record] = plugin.state()
    os.kill(record["pid"], signal.SIGKILL)

    def serving() -> bool:
        try:
            return Path(ds, "README").read_bytes() == b"v2\n"
        except OSError as exc:
            assert exc.errno in DEAD_DAEMON_ERRNOS | {errno.ENOENT}, exc
            return False

    wait_until(serving, 90, "the target serves again")
    wait_until(lambda: plugin.state()[0]["pid"] != record["pid"], 30, "the new pid recorded")
    [after] = plugin.state()
    assert after["resolved"] == "imgs@v2" and after["published_at"] == record["published_at"]
    assert _mount_options(ds) == [["ro"]]  # one mount (the dead one detached), read-only as published
    plugin.unpublish(ds, "ds")


def _mount_options(path: str) -> list[list[str]]:
    """The read-only flag of every mount at ``path``, bottom first (per-mount options only)."""
    with open("/proc/self/mountinfo") as fh:
        entries = [line.split() for line in fh]
    return [[o for o in e[5].split(",") if o in ("ro", "rw")] for e in entries if e[4] == path]


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_restart_adopts_live_mounts_and_forgets_targets_whose_pod_dir_is_gone(
    own_plugin: Plugin, csi_env: CsiEnv
) -> None:
    plugin = own_plugin.start()
    kept, orphan = target(plugin, "kept"), target(plugin, "orphan")
    plugin.publish(kept, {"dataset": "imgs", "version": "1"}, volume_id="kept")
    plugin.publish(orphan, {"dataset": "imgs", "version": "1"}, volume_id="orphan")
    before = {p["target_path"]: p["pid"] for p in plugin.state()}
    plugin.kill9()  # the plugin only: its mount processes keep serving
    assert Path(kept, "README").read_bytes() == b"v1\n"
    subprocess.run(["umount", orphan], check=True)  # the CO cleaned up this pod while the plugin was down
    shutil.rmtree(Path(orphan).parent)

    restarted = Plugin(plugin.root, plugin.config_path, check_interval=3600).start()
    own_plugin.proc, own_plugin.channel = restarted.proc, restarted.channel
    after = {p["target_path"]: p["pid"] for p in restarted.state()}
    assert after == {kept: before[kept]}  # adopted as it was, not remounted
    assert not os.path.exists(f"/proc/{before[orphan]}") or _zombie(before[orphan])
    assert not Path(orphan).parent.exists()  # not recreated
    assert Path(kept, "README").read_bytes() == b"v1\n"
    restarted.unpublish(kept, "kept")
    assert not os.path.exists(kept)


def staging(plugin: Plugin, name: str) -> str:
    path = plugin.root / "plugins" / name / "globalmount"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _stage_two_pods(plugin: Plugin) -> tuple[str, list[str], int]:
    stage, pods = staging(plugin, "shared"), [target(plugin, "pod-a"), target(plugin, "pod-b")]
    plugin.stage(stage, {"dataset": "imgs", "version": "1"}, volume_id="shared")
    for pod in pods:
        plugin.publish(pod, {"dataset": "imgs", "version": "1"}, volume_id="shared", staging=stage)
    [daemon] = [p["pid"] for p in plugin.state() if p.get("staged")]
    # the targets are binds: no process of their own
    assert [p["pid"] for p in plugin.state() if not p.get("staged")] == [0, 0]
    return stage, pods, daemon


def _serves_v1(csi_env: CsiEnv, *paths: str) -> bool:
    try:
        return all(Path(p, "train", "a.bin").read_bytes() == csi_env.files[1]["train/a.bin"] for p in paths)
    except OSError as exc:
        assert exc.errno in DEAD_DAEMON_ERRNOS | {errno.ENOENT}, exc
        return False


def test_supervisor_repairs_a_killed_staged_daemon_and_every_target_bound_from_it(
    own_plugin: Plugin, csi_env: CsiEnv
) -> None:
    own_plugin.check_interval = 0.5
    plugin = own_plugin.start()
    stage, pods, daemon = _stage_two_pods(plugin)
    os.kill(daemon, signal.SIGKILL)
    wait_until(lambda: _serves_v1(csi_env, stage, *pods), 90, "the stage and both targets serve again")
    [after] = [p for p in plugin.state() if p.get("staged")]
    assert after["pid"] not in (0, daemon) and after["resolved"] == "imgs@v1"
    assert [_mount_options(path) for path in (stage, *pods)] == [[["ro"]]] * 3  # no dead mount left below
    for pod in pods:
        plugin.unpublish(pod, "shared")
    plugin.unstage(stage, "shared")


def test_restart_recovers_staged_and_published_volumes(own_plugin: Plugin, csi_env: CsiEnv) -> None:
    plugin = own_plugin.start()
    stage, pods, daemon = _stage_two_pods(plugin)
    plugin.kill9()  # the plugin alone: its staged daemon keeps serving, and is adopted as it is
    assert _serves_v1(csi_env, *pods)
    restarted = Plugin(plugin.root, plugin.config_path, check_interval=3600).start()
    own_plugin.proc, own_plugin.channel = restarted.proc, restarted.channel
    assert [p["pid"] for p in restarted.state() if p.get("staged")] == [daemon]

    restarted.kill9()  # now the plugin and the staged daemon
    os.kill(daemon, signal.SIGKILL)
    wait_until(lambda: not os.path.exists(f"/proc/{daemon}/cmdline") or _zombie(daemon), 30, "daemon gone")
    assert_enotconn(pods[0])
    again = Plugin(plugin.root, plugin.config_path, check_interval=3600).start()  # ready after the check
    own_plugin.proc, own_plugin.channel = again.proc, again.channel
    assert _serves_v1(csi_env, stage, *pods)
    assert Path(pods[1], "README").read_bytes() == b"v1\n"
    [record] = [p for p in again.state() if p.get("staged")]
    assert record["pid"] not in (0, daemon)
    assert sorted(p["target_path"] for p in again.state() if p.get("staging_path") == stage) == sorted(pods)
    # the same requests again are no-ops; unpublishing one pod leaves the other reading
    again.stage(stage, {"dataset": "imgs", "version": "1"}, volume_id="shared")
    again.publish(pods[0], {"dataset": "imgs", "version": "1"}, volume_id="shared", staging=stage)
    again.unpublish(pods[0], "shared")
    assert Path(pods[1], "val", "c.txt").read_bytes() == b"see\n"
    again.unpublish(pods[1], "shared")
    again.unstage(stage, "shared")
    assert not [p for p in again.state()]


def test_volume_stats_show_a_dead_shared_process_on_every_target_until_one_publish_repairs_all(
    own_plugin: Plugin, csi_env: CsiEnv
) -> None:
    import grpc

    from csi.proto_gen import csi_pb2 as pb

    plugin = own_plugin.start()  # no supervisor pass after the first: repairs come from republishing
    stage, pods, daemon = _stage_two_pods(plugin)
    healthy = plugin.stats(pods[0], "shared")
    assert not healthy.volume_condition.abnormal and "imgs@v1" in healthy.volume_condition.message
    assert {u.unit for u in healthy.usage} == {pb.VolumeUsage.BYTES, pb.VolumeUsage.INODES}
    for path, volume_id in ((pods[0], "other"), (str(plugin.root / "nowhere"), "shared")):
        with pytest.raises(grpc.RpcError) as err:
            plugin.stats(path, volume_id)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        plugin.stats("", "shared")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    os.kill(daemon, signal.SIGKILL)
    wait_until(lambda: not os.path.exists(f"/proc/{daemon}/cmdline") or _zombie(daemon), 30, "daemon gone")
    for path in (stage, *pods):
        condition = plugin.stats(path, "shared").volume_condition
        assert condition.abnormal and "daemon dead" in condition.message, condition.message
    # the same publish again remounts the stage, and every target of it is bound again at once
    plugin.publish(pods[0], {"dataset": "imgs", "version": "1"}, volume_id="shared", staging=stage)
    assert _serves_v1(csi_env, stage, *pods)
    assert not any(plugin.stats(path, "shared").volume_condition.abnormal for path in (stage, *pods))
    for pod in pods:
        plugin.unpublish(pod, "shared")
    plugin.unstage(stage, "shared")
