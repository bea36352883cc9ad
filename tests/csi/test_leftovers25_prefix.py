"""A CSI dataset volume, as the pod sees it, shows which version it is: ``MountSource`` checks
it, and refuses one published with a prefix (leftovers25).

The volume is a bind of ``MOUNT/<dataset>/v<seq>[/<prefix>]`` of the plugin's FUSE view: no
``.datahub`` at its root, so ``MountSource`` took it for a plain directory. Checked as another
version, it passed and read that version's bytes under the records asked for; with a prefix,
record ``<prefix>/x`` was read as ``<target>/<prefix>/x`` (another key's file, or none). The
version now comes from the bind's root in /proc/self/mountinfo, which the pod sees too.
"""

from __future__ import annotations

import pytest

from datahub.catalog import open_catalog
from datahub.errors import InvalidInput
from tests.csi.conftest import CsiEnv, Plugin

pytestmark = pytest.mark.fuse


def _bytes(data: bytes | memoryview, _labels: object) -> bytes:
    return bytes(data)


def test_a_dataset_volume_is_checked_as_its_version(plugin: Plugin, csi_env: CsiEnv) -> None:
    from datahub.torch import MountSource, VersionDataset

    target = csi_env.target("lo25-version")
    plugin.publish(target, {"dataset": "imgs", "version": "stable"}, volume_id="vol-lo25v")  # v1
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        with pytest.raises(InvalidInput) as refused:  # v2's README read v1's bytes
            VersionDataset.from_catalog(catalog, "imgs", 2, MountSource(target), transform=_bytes)
        assert f"{target} shows imgs@v1, not imgs@v2" in refused.value.message
        ds = VersionDataset.from_catalog(catalog, "imgs", 1, MountSource(target), transform=_bytes)
        assert {r.key: ds[i] for i, r in enumerate(ds.records)} == csi_env.files[1]
    finally:
        catalog.close()
        plugin.unpublish(target, "vol-lo25v")


def test_a_volume_published_with_a_prefix_is_refused(plugin: Plugin, csi_env: CsiEnv) -> None:
    from datahub.torch import MountSource, VersionDataset

    target = csi_env.target("lo25-prefix")
    plugin.publish(target, {"dataset": "imgs", "version": "1", "prefix": "train"}, volume_id="vol-lo25p")
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        for prefix in ("train", ""):
            with pytest.raises(InvalidInput) as refused:
                VersionDataset.from_catalog(
                    catalog, "imgs", 1, MountSource(target), prefix=prefix, transform=_bytes
                )
            said = refused.value.message
            assert f"{target} shows only the keys below 'train' of imgs@v1" in said, said
            assert "publish the volume without a prefix" in said and "CacheSource" in said, said
    finally:
        catalog.close()
        plugin.unpublish(target, "vol-lo25p")
