"""review15a: a workspace commit refused after the publish (csinode15), attacked.

The node token's role on ``commitTo`` is taken away while a pod writes; the mount process is
left alive or killed (-9, a crashed daemon whose supervisor's remount takes the writer lease
again, which names the target); the plugin itself restarts between the refusal and the
grant. Whatever the path: the unpublish is PERMISSION_DENIED and keeps the volume, and once
the grant is back the next retry commits every file the pod closed, with its last bytes,
exactly once (one commit, nothing else in the dataset)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import grpc
import pytest

from datahub.catalog import open_catalog
from tests.csi.conftest import CsiEnv, Plugin, mounts_under, wait_until
from tests.csi.test_api_catalog import api_module_plugin, api_plugin
from tests.csi.test_csinode15 import NODE, SA, _inline, _records, _refused, _set_acl

pytestmark = pytest.mark.fuse
__all__ = ["api_module_plugin", "api_plugin"]  # the fixtures, used by name


def _restart(plugin: Plugin, check_interval: float | None = None) -> None:
    """The plugin killed -9 and started again on its state (its mount processes are their own),
    with ``check_interval`` if given."""
    plugin.kill9()
    if check_interval is not None:
        plugin.check_interval = check_interval
    again = Plugin(
        plugin.root,
        plugin.config_path,
        env=plugin.env,
        mode=plugin.mode,
        check_interval=plugin.check_interval,
    ).start()
    plugin.proc, plugin.channel = again.proc, again.channel  # the fixture's teardown stops this one


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


@pytest.mark.parametrize("daemon", ["alive", "killed"])
def test_a_refused_commit_survives_a_dead_daemon_and_a_plugin_restart_and_commits_once_granted(
    api_plugin: Plugin, csi_env: CsiEnv, daemon: str
) -> None:
    dataset = workspace = f"r15a-{daemon}"
    if daemon == "killed":
        # only the start-up pass repairs: the supervisor's periodic pass (0.5 s) remounted the
        # killed daemon's volume while the unpublish below ran, which then found a mount its
        # record did not name yet (FAILED_PRECONDITION; once in a fresh suite) instead of the
        # dead daemon this case is about
        _restart(api_plugin, check_interval=3600)
    _set_acl(csi_env, dataset, {SA: "writer", NODE: "writer"})
    target = csi_env.target(workspace)
    api_plugin.publish(target, _inline(dataset, workspace), volume_id=workspace)
    root = Path(target)
    (root / "logs").mkdir()
    (root / "logs" / "epoch1.txt").write_bytes(b"loss 0.9\n")
    (root / "model.bin").write_bytes(b"first" * 1000)
    (root / "model.bin").write_bytes(b"second" * 1000)  # the pod's last bytes are what counts
    (root / "scratch.tmp").write_bytes(b"gone")
    (root / "scratch.tmp").unlink()
    expected = {"logs/epoch1.txt": b"loss 0.9\n", "model.bin": b"second" * 1000}

    _set_acl(csi_env, dataset, {SA: "writer", NODE: "reader"})
    if daemon == "killed":
        [record] = api_plugin.state()
        os.kill(record["pid"], signal.SIGKILL)
        wait_until(lambda: _gone(record["pid"]), 30, "the mount process gone")

    err = _refused(lambda: api_plugin.unpublish(target, workspace))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err.details()
    assert "flushed to the object store and kept" in err.details(), err.details()
    [record] = api_plugin.state()
    assert record["volume_id"] == workspace
    assert _records(csi_env, dataset) == {}

    _restart(api_plugin)
    err = _refused(lambda: api_plugin.unpublish(target, workspace))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err.details()

    _set_acl(csi_env, dataset, {SA: "writer", NODE: "writer"})
    api_plugin.unpublish(target, workspace)
    assert _records(csi_env, dataset) == expected
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        assert catalog.store.head(dataset) == 1  # one commit, not one per retry
    finally:
        catalog.close()
    assert api_plugin.state() == [] and mounts_under(csi_env.root / "pods") == []
