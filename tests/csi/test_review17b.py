"""review17b's attacks on csi16: an unpublish racing a repair, across a restart of the plugin.

A repair of a killed mount process detaches the dead FUSE mount from the plugin's ``volumes/``
before it starts the new process; until the new view is bound over them, the volume's targets
show the dead view, whose device no mount under ``volumes/`` has any more. csi16 let an
unpublish take that view for the plugin's own (not another driver's mount, which it refuses
with FAILED_PRECONDITION) by remembering the detached devices, in memory only. A plugin
restarted after the detach (a node upgrade, an OOM kill: the kubelet restarts it) remembered
none, so while the repair kept failing, every unpublish of the target was FAILED_PRECONDITION
and the pod stayed Terminating, though the same plugin not restarted lets it go.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from csi.node import REPAIR_HOLD
from tests.csi.conftest import NODE_ID, CsiEnv, Plugin, mounts_under, wait_until
from tests.csi.test_csirace16 import HOLD_TIMEOUT, _authors, _committed, _daemons_of, _path, repair_held
from tests.csi.test_deploy import objects
from tests.csi.test_publish import pod_info


def test_the_shipped_driver_has_the_kubelet_write_the_pod_info_over_a_pods_own() -> None:
    """Who a pod is (its service account: the access check, a workspace's author; its
    namespace: an inline workspace's scope) comes from ``csi.storage.k8s.io/`` keys of the
    volume context. A pod's spec writes an inline volume's attributes, those keys included;
    the kubelet writes its own over them only with ``podInfoOnMount: true``. Without it a pod
    naming another namespace's service account in its attributes is that account to the
    plugin, which cannot tell: the manifest must keep it on."""
    [driver] = objects("CSIDriver")
    assert driver["spec"]["podInfoOnMount"] is True


@pytest.fixture
def own_held_plugin(csi_env: CsiEnv, tmp_path: Path) -> Iterator[Plugin]:
    """A plugin of this test's own (it is killed and restarted), whose repairs wait at the FIFO
    ``<root>/repair-hold`` while the test has made it."""
    plugin = Plugin(tmp_path, csi_env.config_path, env={REPAIR_HOLD: str(tmp_path / "repair-hold")})
    try:
        yield plugin.start()
    finally:
        plugin.teardown()


def _failed_repairs(plugin: Plugin, target: str) -> int:
    return plugin.log_path.read_text(errors="replace").count(f"could not recover {target}")


@pytest.mark.fuse
def test_unpublish_after_a_restart_during_a_failed_repair_succeeds_and_commits(
    own_held_plugin: Plugin, csi_env: CsiEnv
) -> None:
    plugin = own_held_plugin
    context = {"workspace": "r17b-restart", "commitTo": "r17b-restart"}
    target = _path(plugin, "pods", "r17b-restart", "mount")
    plugin.publish(target, context, volume_id="r17b-restart")
    Path(target, "ckpt.bin").write_bytes(b"acknowledged")  # close() returns once journaled
    [record] = plugin.state()
    with repair_held(plugin, record["pid"]):  # detached; the target shows the dead view
        Path(record["volume_dir"], "mnt", "in-the-way").write_bytes(b"")  # the new mount is refused
    wait_until(lambda: _failed_repairs(plugin, target) >= 1, HOLD_TIMEOUT, "the repair failed")

    plugin.kill9()  # the kubelet restarts it; the target still shows the dead view
    restarted = Plugin(plugin.root, plugin.config_path, env=plugin.env).start()  # after its first pass
    plugin.proc, plugin.channel = restarted.proc, restarted.channel  # the fixture stops this one
    assert _failed_repairs(plugin, target) >= 2  # the restarted plugin's repair failed too

    # before: FAILED_PRECONDITION, "target ... holds a fuse mount this plugin did not make"
    restarted.unpublish(target, "r17b-restart")
    assert restarted.state() == [] and mounts_under(plugin.state_dir) == [] and _daemons_of(plugin) == []
    assert not os.path.exists(target) and target not in mounts_under(plugin.root / "pods")
    assert not os.path.exists(record["volume_dir"])
    assert _committed(csi_env, "r17b-restart") == {"ckpt.bin": 12}


@pytest.mark.fuse
def test_unpublish_and_unstage_after_a_restart_during_a_failed_repair_of_the_stage_succeed(
    own_held_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """The same for a staged workspace (a PV): the stage's repair fails past the detach, the
    plugin restarts; the target bound from the stage unpublishes, the stage unstages, and the
    workspace commits what was acknowledged."""
    plugin = own_held_plugin
    staging = _path(plugin, "plugins", "r17b", "globalmount", made=True)
    context = {"workspace": "r17b-staged", "commitTo": "r17b-staged"}
    target = _path(plugin, "pods", "r17b-staged", "mount")
    plugin.stage(staging, context, volume_id="r17b-staged")
    plugin.publish(target, context, volume_id="r17b-staged", staging=staging)
    Path(target, "ckpt.bin").write_bytes(b"staged and acknowledged")
    [stage] = [p for p in plugin.state() if p.get("staged")]
    with repair_held(plugin, stage["pid"]):
        Path(stage["volume_dir"], "mnt", "in-the-way").write_bytes(b"")
    wait_until(lambda: _failed_repairs(plugin, staging) >= 1, HOLD_TIMEOUT, "the repair failed")

    plugin.kill9()
    restarted = Plugin(plugin.root, plugin.config_path, env=plugin.env).start()
    plugin.proc, plugin.channel = restarted.proc, restarted.channel
    assert _failed_repairs(plugin, staging) >= 2

    restarted.unpublish(target, "r17b-staged")  # before: FAILED_PRECONDITION
    restarted.unstage(staging, "r17b-staged")
    assert restarted.state() == [] and mounts_under(plugin.state_dir) == [] and _daemons_of(plugin) == []
    assert staging not in mounts_under(plugin.root / "plugins") and not os.path.exists(target)
    assert _committed(csi_env, "r17b-staged") == {"ckpt.bin": 23}


FORGED = "2026-11-30 12:00:00 INFO csi.node: published evil (dataset@v1) at /forged"


@pytest.mark.fuse
@pytest.mark.parametrize(
    "context",
    [
        {"dataset": "imgs", f"x\n{FORGED}": "1"},  # an unknown attribute
        {f"datasets\n{FORGED}": "imgs"},  # no kind named
        {"dataset": "imgs", "version": f"1\n{FORGED}"},
        {"workspace": f"w\n{FORGED}"},
        {"dataset": "imgs", "cache": f"none\n{FORGED}"},
    ],
)
def test_a_volume_attribute_with_a_newline_forges_no_line_of_the_plugin_log(
    plugin: Plugin, context: dict[str, str]
) -> None:
    """A pod's spec writes an inline volume's attribute names and values; the plugin logs a
    refused publish with the reason, which names them: a newline in one wrote a line of the
    pod's choosing into the node plugin's log."""
    target = _path(plugin, "pods", "r17b-forged", "mount")
    start = plugin.log_path.stat().st_size
    with pytest.raises(grpc.RpcError) as refused:
        plugin.publish(target, context, volume_id="r17b-forged")
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    with open(plugin.log_path, "rb") as fh:
        fh.seek(start)
        logged = fh.read().decode(errors="replace")
    assert "r17b-forged" in logged  # the refusal is logged
    assert not any(line.startswith(FORGED) for line in logged.splitlines()), logged
    assert plugin.state() == []


@pytest.mark.fuse
def test_a_pvs_attributes_name_no_author_of_its_versions(plugin: Plugin, csi_env: CsiEnv) -> None:
    """A PV's volumeAttributes cannot name who wrote its versions: an ``author`` attribute is
    refused, and pod info keys in them (a PV written by hand with another namespace's service
    account) are not the author either: the stage names no pod, so the node is."""
    staging = _path(plugin, "plugins", "r17b-pv", "globalmount", made=True)
    context = {"workspace": "r17b-pv", "commitTo": "r17b-pv"}
    with pytest.raises(grpc.RpcError) as refused:
        plugin.stage(
            staging, {**context, "author": "system:serviceaccount:kube-system:admin"}, volume_id="r17b-pv"
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert "'author'" in refused.value.details()
    forged = {**context, **pod_info("kube-system", "admin")}
    target = _path(plugin, "pods", "r17b-pv", "mount")
    plugin.stage(staging, forged, volume_id="r17b-pv")
    plugin.publish(target, {**context, **pod_info("team-a", "trainer")}, volume_id="r17b-pv", staging=staging)
    Path(target, "model.pt").write_bytes(b"weights")
    plugin.unpublish(target, "r17b-pv")
    plugin.unstage(staging, "r17b-pv")
    assert _authors(csi_env, "r17b-pv") == [f"system:node:{NODE_ID}"]
