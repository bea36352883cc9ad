"""review17d's attacks on review17b: the dead views a repair detached, kept in the state file.

review17b persists, in a volume's record, the (device, filesystem type) of the dead FUSE views
a repair detached, so an unpublish takes a target that shows one for the plugin's own, across
a restart too. The record outlives what it describes: after a node reboot (or once the last
bind of the dead view is gone, until the supervisor's next prune) the kernel gives that device
number to the next mount it makes, the lowest free one first. A healthy mount of someone
else's with that number on a target passed for the dead view, and the plugin unmounted it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from csi import mounts
from tests.csi.conftest import CsiEnv, Plugin
from tests.csi.test_csirace16 import _path


@pytest.fixture
def own_plugin(csi_env: CsiEnv, tmp_path: Path) -> Iterator[Plugin]:
    """A plugin of this test's own: it is killed and restarted on an edited state file."""
    plugin = Plugin(tmp_path, csi_env.config_path)
    try:
        yield plugin.start()
    finally:
        plugin.teardown()


def _top(path: str) -> tuple[str, str]:
    [*_, top] = [(dev, fstype) for point, dev, fstype in mounts.mount_entries() if point == path]
    return top


@pytest.mark.fuse
def test_a_healthy_foreign_mount_with_a_detached_views_device_number_is_never_unmounted(
    own_plugin: Plugin,
) -> None:
    """The record of a target keeps a detached dead view's device, which a foreign mount on the
    target now has (its number reused: after a reboot, numbers restart from the lowest free
    one). The foreign mount answers, a dead view never does: the unpublish refuses it
    (FAILED_PRECONDITION, as any mount this plugin did not make) and leaves it mounted."""
    plugin = own_plugin
    context = {"workspace": "r17d-reused", "commitTo": "r17d-reused"}
    target = _path(plugin, "pods", "r17d-reused", "mount")
    plugin.publish(target, context, volume_id="r17d-reused")
    Path(target, "ckpt.bin").write_bytes(b"acknowledged")
    # a mount of someone else's stacked on the target (a pod's own, another driver's)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "r17d-foreign", target], check=True)
    Path(target, "theirs").write_bytes(b"not the plugin's")
    foreign = _top(target)

    plugin.kill9()
    state = json.loads((plugin.state_dir / "published.json").read_text())
    [record] = state["published"]
    record["extra"]["detached"] = [list(foreign)]  # a dead view the number was reused from
    (plugin.state_dir / "published.json").write_text(json.dumps(state))
    restarted = Plugin(plugin.root, plugin.config_path).start()
    plugin.proc, plugin.channel = restarted.proc, restarted.channel  # the fixture stops this one

    with pytest.raises(grpc.RpcError) as refused:  # before: the tmpfs was unmounted
        restarted.unpublish(target, "r17d-reused")
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value.details()
    assert _top(target) == foreign and Path(target, "theirs").read_bytes() == b"not the plugin's"

    subprocess.run(["umount", target], check=True)  # its owner unmounts it; the CO retries
    restarted.unpublish(target, "r17d-reused")
    assert restarted.state() == []
