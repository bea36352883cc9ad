"""caller43: NodeUnpublishVolume of a path the plugin never published removes nothing there.

review27 kept every node RPC inside the kubelet's dir; inside it, an unpublish of a target the
plugin holds no record of still removed the directory (``rmdir``) when it was empty: another
pod's empty ``emptyDir``, or another driver's target not yet mounted. Linux (3.18 and later)
detaches, in every other mount namespace, the mounts of a directory removed so: the pod's
containers lost that volume. Now the directory goes only with a leftover of the plugin's own (a
bind of its mount, or its volume dir, which a crash in a publish left), and a published target
is removed while its record still exists, so a retry after a crash there still finds it ours.
Driven over the plugin's gRPC socket, as tests/csi do; the kubelet dir is the session's
base temp dir (tests/csi/conftest.py).
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.errors import DatasetNotFound
from tests.csi.conftest import CsiEnv, Plugin, handed_clean, mounts_under

pytestmark = pytest.mark.fuse


@pytest.fixture
def node(plugin: Plugin) -> Iterator[Plugin]:
    yield from handed_clean(plugin)


def test_another_pods_empty_volume_dir_is_left_alone(node: Plugin, csi_env: CsiEnv, tmp_path: Path) -> None:
    cache = Path(csi_env.root) / "pods" / "pod-c43" / "volumes" / "kubernetes.io~empty-dir" / "cache"
    cache.mkdir(parents=True)
    container = tmp_path / "container-view"  # the pod's container sees the emptyDir through a bind
    container.mkdir()
    subprocess.run(["mount", "--bind", str(cache), str(container)], check=True)
    try:
        node.unpublish(str(cache), "c43-never-published")  # OK: nothing of ours was ever there
        assert cache.is_dir()  # before: removed
        assert str(container) in mounts_under(tmp_path)
    finally:
        subprocess.run(["umount", "-l", str(container)], capture_output=True)


def test_a_published_target_is_still_removed_at_unpublish(node: Plugin, csi_env: CsiEnv) -> None:
    target = csi_env.target("c43-pub")
    version = csi_env.commit("c43imgs", {"a.txt": b"alpha"})
    node.publish(target, {"dataset": "c43imgs", "version": str(version)}, volume_id="c43-pub")
    assert target in mounts_under(Path(target).parent)
    node.unpublish(target, "c43-pub")
    assert not Path(target).exists()
    node.unpublish(target, "c43-pub")  # a retry: OK, nothing left


def test_a_workspace_published_read_only_takes_no_write_and_commits_nothing(
    node: Plugin, csi_env: CsiEnv
) -> None:
    """``readonly`` on a workspace's publish: the pod's writes fail (EROFS), and its unpublish
    commits no version into ``commitTo`` (checked, held on the base too)."""
    target = csi_env.target("c43-ro")
    node.publish(target, {"workspace": "c43-ro", "commitTo": "c43out"}, volume_id="c43-ro", readonly=True)
    with pytest.raises(OSError) as err:
        Path(target, "x.txt").write_bytes(b"x")
    assert err.value.errno == errno.EROFS
    node.unpublish(target, "c43-ro")
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        try:
            versions = catalog.log("c43out")
        except DatasetNotFound:
            versions = []
        assert not [v for v in versions if v.seq > 0], versions
    finally:
        catalog.close()
