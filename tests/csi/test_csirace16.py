"""NodeUnpublishVolume while the supervisor repairs the volume's killed mount process, and who
the versions a CSI workspace commits name as their author (csi16).

The repair detaches the dead FUSE mount from the plugin's private dir before it starts the
new process; until the new view is bound over them, the volume's targets still show the dead
view, whose device no mount under the plugin's ``volumes/`` has any more. An unpublish of a
target bound from a stage being repaired took that view for another driver's mount and
answered FAILED_PRECONDITION, and the pod's teardown stalled on it. The repair is held at
its pause point (``csi.node.REPAIR_HOLD``, a FIFO) while the test unpublishes, the way a
loaded node's slow mount-process start left it there.

A workspace volume's versions named no author (the plugin's own recovery commit) or the
mount process's login name (``root`` on every node): now the pod's service account that
published an inline volume, else the node (docs/csi.md, "Who wrote a workspace's versions").
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from csi.node import PASS_HOLD, REPAIR_HOLD
from datahub.catalog import open_catalog
from tests.csi.conftest import NODE_ID, CsiEnv, Plugin, handed_clean, mounts_under, wait_until
from tests.csi.test_publish import pod_info

pytestmark = pytest.mark.fuse

HOLD_TIMEOUT = 90.0  # the supervisor's next pass (0.5 s) notices the dead daemon; a start under load


@pytest.fixture(scope="module")
def held_module_plugin(csi_env: CsiEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    """A plugin whose repairs wait at the FIFO ``<root>/repair-hold``, while a test has made it."""
    root = tmp_path_factory.mktemp("csirace16")
    plugin = Plugin(
        root,
        csi_env.config_path,
        env={REPAIR_HOLD: str(root / "repair-hold"), PASS_HOLD: str(root / "pass-hold")},
    )
    try:
        yield plugin.start()
    finally:
        plugin.teardown()


@pytest.fixture
def held_plugin(held_module_plugin: Plugin) -> Iterator[Plugin]:
    yield from handed_clean(held_module_plugin)


def _writer_of(fifo: str, fds: list[int]) -> bool:
    """Open the FIFO's write end into ``fds`` once the plugin holds its read end (ENXIO before)."""
    try:
        fds.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            raise
    return bool(fds)


@contextlib.contextmanager
def repair_held(plugin: Plugin, pid: int, *, between_stage_and_target: bool = False) -> Iterator[None]:
    """Kill -9 the mount process ``pid``, wait until the supervisor's repair reached the pause
    point, hold it there for the block, then release it (the FIFO removed: no later repair waits).

    The FIFO's write end opens only once the repair opened the read end (ENXIO before): that
    is the repair waiting there. Closing it is the repair's end of file: it goes on.
    """
    fifo = str(plugin.root / "repair-hold")
    fds: list[int] = []
    os.mkfifo(fifo)  # armed before the kill, so the repair cannot pass the pause point first
    try:
        if between_stage_and_target:
            _kill_after_the_pass_saw_the_stage(plugin, pid)
        else:
            os.kill(pid, signal.SIGKILL)
        wait_until(
            lambda: _writer_of(fifo, fds), HOLD_TIMEOUT, "the supervisor's repair held at its pause point"
        )
        yield
    finally:
        os.unlink(fifo)  # before the release: the repair's next attempt must not wait again
        for fd in fds:
            os.close(fd)


def _kill_after_the_pass_saw_the_stage(plugin: Plugin, pid: int) -> None:
    """Kill -9 the stage's mount process ``pid`` while a supervisor pass is held after it found
    the stage healthy and before it looks at the targets bound from it; then let the pass go on.
    The pass then finds the target broken by a stage it looked at alive: the window a loaded
    machine opened by chance (a suite run's ABORTED unpublish)."""
    fifo = str(plugin.root / "pass-hold")
    fds: list[int] = []
    os.mkfifo(fifo)
    try:
        wait_until(lambda: _writer_of(fifo, fds), HOLD_TIMEOUT, "a supervisor pass held before the targets")
        os.kill(pid, signal.SIGKILL)
    finally:
        os.unlink(fifo)  # before the release: the next passes must not wait
        for fd in fds:
            os.close(fd)


def _path(plugin: Plugin, *parts: str, made: bool = False) -> str:
    """A target (its parent exists) or a staging path (``made``: it exists too) under the
    plugin's root, as the kubelet hands them over: what a failing test leaves mounted there,
    the plugin's teardown detaches."""
    path = plugin.root.joinpath(*parts)
    (path if made else path.parent).mkdir(parents=True, exist_ok=True)
    return str(path)


def _daemons_of(plugin: Plugin) -> list[int]:
    """Mount processes of this plugin: their command line names a volume's config under its state dir."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as fh:
            if str(plugin.state_dir / "volumes").encode() in fh.read():
                found.append(int(pid))
    return found


def _authors(csi_env: CsiEnv, dataset: str) -> list[str]:
    """The authors of ``dataset``'s versions, oldest first (what ``datahub log`` shows)."""
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        return [v.author for v in sorted(catalog.log(dataset), key=lambda v: v.seq)]
    finally:
        catalog.close()


def _committed(csi_env: CsiEnv, dataset: str) -> dict[str, int]:
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        return {r.key: r.size for r in catalog.list_records(dataset, None)}
    finally:
        catalog.close()


@pytest.mark.parametrize("killed", ["any time", "between the pass's stage and target"])
def test_unpublish_while_the_supervisor_repairs_the_killed_stage_succeeds_and_loses_nothing(
    held_plugin: Plugin, csi_env: CsiEnv, killed: str
) -> None:
    """``between …``: the pass looked at the stage alive, then at its target broken. It repaired
    the stage through the target, holding the target's lock for the whole remount, and the
    unpublish answered ABORTED (a loaded suite run; now the stage is repaired as itself)."""
    plugin = held_plugin
    staging = _path(held_plugin, "plugins", "race16", "globalmount", made=True)
    context = {"workspace": "race16-ws", "commitTo": "race16-results"}
    target = _path(held_plugin, "pods", "race16", "mount")
    plugin.stage(staging, context, volume_id="race16")
    plugin.publish(target, context, volume_id="race16", staging=staging)
    Path(target, "ckpt.bin").write_bytes(b"acknowledged" * 1000)  # close() returns once journaled
    [stage] = [p for p in plugin.state() if p.get("staged")]
    with repair_held(
        plugin, stage["pid"], between_stage_and_target=killed != "any time"
    ):  # the dead FUSE mount is detached; the target still shows its view
        # before: FAILED_PRECONDITION, "target ... holds a fuse mount this plugin did not make"
        plugin.unpublish(target, "race16")
        assert not os.path.exists(target) and target not in mounts_under(plugin.root / "pods")
        assert [p["target_path"] for p in plugin.state()] == [staging]
        plugin.unpublish(target, "race16")  # the kubelet's retry: the volume is gone, still success
    plugin.unstage(staging, "race16")  # ABORTED while the repair ends (retried), then flushes and commits
    assert plugin.state() == [] and mounts_under(plugin.state_dir) == [] and _daemons_of(plugin) == []
    assert staging not in mounts_under(plugin.root / "plugins")
    assert _committed(csi_env, "race16-results") == {"ckpt.bin": 12000}


def test_unpublish_after_a_repair_failed_past_the_detach_succeeds_and_commits(
    held_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """A repair that detached the dead mount and then could not start the new process (here
    its mount point is not empty) left the target showing a view of no mount of ours: every
    unpublish was FAILED_PRECONDITION, for as long as the repair kept failing."""
    plugin = held_plugin
    context = {"workspace": "race16-failed", "commitTo": "race16-failed"}
    target = _path(held_plugin, "pods", "race16-failed", "mount")
    plugin.publish(target, context, volume_id="race16-failed")
    Path(target, "ckpt.bin").write_bytes(b"acknowledged")
    [record] = plugin.state()
    with repair_held(plugin, record["pid"]):
        Path(record["volume_dir"], "mnt", "in-the-way").write_bytes(b"")  # the new mount is refused
    wait_until(
        lambda: f"could not recover {target}" in plugin.log_path.read_text(errors="replace"),
        HOLD_TIMEOUT,
        "the repair failed",
    )
    plugin.unpublish(target, "race16-failed")  # ABORTED while a retried repair holds it: retried
    assert plugin.state() == [] and mounts_under(plugin.state_dir) == [] and _daemons_of(plugin) == []
    assert not os.path.exists(target) and not os.path.exists(record["volume_dir"])
    assert _committed(csi_env, "race16-failed") == {"ckpt.bin": 12}


def test_unpublish_of_an_inline_workspace_under_repair_waits_for_it_and_loses_nothing(
    held_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """An inline volume's repair holds its target: the unpublish is ABORTED (the kubelet retries)
    until the new process serves, then stops it, and the workspace commits what was acknowledged."""
    plugin = held_plugin
    context = {"workspace": "race16-inline", "commitTo": "race16-inline-results"}
    target = _path(held_plugin, "pods", "race16-inline", "mount")
    plugin.publish(target, context, volume_id="race16-inline")
    Path(target, "out.bin").write_bytes(b"kept" * 500)
    [record] = plugin.state()
    with ThreadPoolExecutor(1) as kubelet:
        with repair_held(plugin, record["pid"]):
            with pytest.raises(grpc.RpcError) as held:
                plugin.node.NodeUnpublishVolume(_unpublish_request(target, "race16-inline"), timeout=60)
            assert held.value.code() == grpc.StatusCode.ABORTED
            retried = kubelet.submit(plugin.unpublish, target, "race16-inline")  # retries ABORTED
        retried.result(300)  # released: the repair ends, then the unpublish stops the new process
    assert plugin.state() == [] and mounts_under(plugin.state_dir) == [] and _daemons_of(plugin) == []
    assert not os.path.exists(target)
    assert _committed(csi_env, "race16-inline-results") == {"out.bin": 2000}


def _unpublish_request(target: str, volume_id: str):
    from csi.proto_gen import csi_pb2 as pb

    return pb.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=target)


def test_an_inline_workspace_commits_as_the_pods_service_account(
    held_plugin: Plugin, csi_env: CsiEnv
) -> None:
    context = {"workspace": "author16-inline", "commitTo": "author16-inline", **pod_info("team-a", "trainer")}
    target = _path(held_plugin, "pods", "author16-inline", "mount")
    held_plugin.publish(target, context, volume_id="author16-inline")
    Path(target, "model.pt").write_bytes(b"weights")
    held_plugin.unpublish(target, "author16-inline")  # the mount process commits as it stops
    assert _authors(csi_env, "author16-inline") == ["system:serviceaccount:team-a:trainer"]


def test_a_staged_workspace_commits_as_the_node(held_plugin: Plugin, csi_env: CsiEnv) -> None:
    """A PV's workspace is mounted at NodeStageVolume, which names no pod: its version is the node's."""
    staging = _path(held_plugin, "plugins", "author16-staged", "globalmount", made=True)
    context = {"workspace": "author16-staged", "commitTo": "author16-staged"}
    target = _path(held_plugin, "pods", "author16-staged", "mount")
    held_plugin.stage(staging, context, volume_id="author16-staged")
    held_plugin.publish(
        target, {**context, **pod_info("team-a", "trainer")}, volume_id="author16-staged", staging=staging
    )
    Path(target, "model.pt").write_bytes(b"weights")
    held_plugin.unpublish(target, "author16-staged")
    held_plugin.unstage(staging, "author16-staged")
    assert _authors(csi_env, "author16-staged") == [f"system:node:{NODE_ID}"]


def test_the_plugins_own_commit_of_a_killed_workspace_names_the_pod_too(
    csi_env: CsiEnv, tmp_path: Path
) -> None:
    """The mount process died, and the supervisor (one pass at start only) did not remount it:
    the unpublish reopens the workspace and commits it itself (csi/finish.py), which named no
    author at all."""
    plugin = Plugin(tmp_path, csi_env.config_path, check_interval=3600).start()
    try:
        context = {
            "workspace": "author16-killed",
            "commitTo": "author16-killed",
            **pod_info("team-b", "eval"),
        }
        target = str(tmp_path / "pod" / "mount")
        os.makedirs(os.path.dirname(target))
        plugin.publish(target, context, volume_id="author16-killed")
        Path(target, "scores.json").write_bytes(b"{}")
        [record] = plugin.state()
        os.kill(record["pid"], signal.SIGKILL)
        plugin.unpublish(target, "author16-killed")
        assert plugin.state() == [] and _daemons_of(plugin) == []
    finally:
        plugin.teardown()
    assert _committed(csi_env, "author16-killed") == {"scores.json": 2}
    assert _authors(csi_env, "author16-killed") == ["system:serviceaccount:team-b:eval"]


def test_datahub_mount_takes_an_author_only_for_what_commit_to_commits(
    csi_env: CsiEnv, tmp_path: Path
) -> None:
    """``--author`` (what the plugin passes) names the author of the ``--commit-to`` version;
    without ``--commit-to`` nothing is committed, so it is refused rather than ignored."""
    datahub = str(Path(sys.executable).with_name("datahub"))
    argv = [datahub, "--config", str(csi_env.config_path), "mount", "--workspace", "w", str(tmp_path)]
    proc = subprocess.run([*argv, "--author", "someone"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "--author names the author of what --commit-to commits: give --commit-to too" in proc.stderr
