"""review14b: the node plugin's adoption of unrecorded mounts (csi14) against mounts of
ANOTHER datahub plugin instance on the same node (its own state dir and socket).

csi14 lets a stage or publish retried after a crash unmount a bind "of ours" it finds on its
path: a bind whose device is one of the FUSE mounts under the plugin's state dir. Another
instance's volumes are not ours: a publish onto a path holding one must be refused, its
mount left serving. Real plugins over their sockets, real FUSE and bind mounts on moto S3.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.csi.conftest import CsiEnv, Plugin
from tests.csi.test_csi14 import V1, _refused, quiet_module_plugin, quiet_plugin  # noqa: F401 (fixtures)
from tests.csi.test_restart import _serves_v1, staging, target
from tests.csi.test_stage import fuse_daemons

pytestmark = pytest.mark.fuse


@contextlib.contextmanager
def _other_instance(root: Path, config_path: Path, pods: Plugin) -> Iterator[tuple[Plugin, str]]:
    """Another plugin instance rooted at ``root``, with a volume staged and published to a pod
    target where ``pods`` (a plugin) keeps its pods; yields it and that target."""
    root.mkdir(parents=True, exist_ok=True)
    other = Plugin(root, config_path, check_interval=3600)
    try:
        other.start()
        stage, pod = staging(other, "theirs"), target(pods, "their-pod")
        other.stage(stage, V1, volume_id="theirs")
        other.publish(pod, V1, volume_id="theirs", staging=stage)
        yield other, pod
    finally:
        other.teardown()


def _left_serving(other: Plugin, csi_env: CsiEnv, pod: str, daemons: set[int]) -> None:
    assert fuse_daemons(other) == daemons, "the other instance's mount process was stopped"
    assert _serves_v1(csi_env, pod), "the other instance's volume was unmounted from its pod"


def test_a_target_holding_a_sibling_instances_volume_is_refused(
    quiet_plugin: Plugin,  # noqa: F811
    csi_env: CsiEnv,
    tmp_path: Path,
) -> None:
    """Two plugin instances with state dirs side by side: one's publish or stage onto the
    other's pod target is FAILED_PRECONDITION, and the other's volume serves on."""
    plugin = quiet_plugin
    with _other_instance(tmp_path / "other", csi_env.config_path, plugin) as (other, pod):
        daemons = fuse_daemons(other)
        _refused(plugin, pod)
        _left_serving(other, csi_env, pod, daemons)
        assert plugin.state() == []


def test_a_target_holding_a_nested_instances_volume_is_refused(
    quiet_plugin: Plugin,  # noqa: F811
    csi_env: CsiEnv,
) -> None:
    """The same with the other instance's root inside this plugin's state dir (two releases
    installed with state dirs /var/lib/datahub-csi and /var/lib/datahub-csi/canary): its FUSE
    mounts lie under this plugin's state dir, yet are not this plugin's volumes. (The pod's
    target is where this plugin's pods are, outside its state dir, as the kubelet's are.)
    Before the fix the publish succeeded: the other instance's bind on its pod was unmounted
    and this plugin's volume bound there in its place."""
    plugin = quiet_plugin
    with _other_instance(plugin.state_dir / "canary", csi_env.config_path, plugin) as (other, pod):
        daemons = fuse_daemons(other)
        _refused(plugin, pod)
        _left_serving(other, csi_env, pod, daemons)
