"""VersionDataset over a real ``datahub mount`` reads the same bytes as through the cache."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from datahub.catalog import Put, open_catalog
from datahub.config import Config
from datahub.errors import InvalidInput
from datahub.torch import CacheSource, MountSource  # no torch here: the tests import its classes
from tests.fuse.conftest import wait_until
from tests.pack.conftest import import_manifest, write_source
from tests.torch.test_fsdirs18 import ODD, import_odd

REPO = Path(__file__).resolve().parents[2]


def _cli(config: Config, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "datahub.cli.main", "--home", config.home, "--json", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)


@contextmanager
def _mounted(config: Config, mnt: Path, *sources: str, warm_up: bool = True) -> Iterator[None]:
    """``datahub mount --background``, and always unmounted again (never leave a mount behind)."""
    mnt.mkdir()
    flags = () if warm_up else ("--no-prefetch",)
    started = _cli(config, "mount", str(mnt), *sources, "--background", *flags)
    assert started.returncode == 0, started.stderr
    try:
        yield
    finally:
        stopped = _cli(config, "umount", str(mnt))
        if stopped.returncode != 0:
            subprocess.run(["fusermount3", "-uz", str(mnt)], check=False)
            pid = json.loads(started.stdout or "{}").get("pid")
            if pid:
                subprocess.run(["kill", str(pid)], check=False)


@pytest.mark.fuse
@pytest.mark.skipif(shutil.which("fusermount3") is None, reason="needs fuse3")
def test_version_dataset_through_a_real_mount(config: Config, tmp_path: Path) -> None:
    from datahub.torch import VersionDataset
    from datahub.torch._torch import DataLoader

    catalog = open_catalog(config.resolved_catalog_url)
    import_manifest(catalog, config, write_source(tmp_path / "src", 5), "photos")
    import_odd(catalog, config, tmp_path)  # ``x`` and ``x/y`` (tests/torch/test_fsdirs18.py)
    mnt = tmp_path / "mnt"
    with _mounted(config, mnt, "photos@v1", "odd@v1"):
        raw = VersionDataset.from_catalog(catalog, "odd", 1, MountSource(mnt / "odd" / "v1"),
                                          transform=lambda data, labels: bytes(data))  # fmt: skip
        assert [raw[i] for i in range(len(raw))] == [ODD[k][0] for k in ("x.txt", "x/y", "z")]
        mounted = VersionDataset.from_catalog(catalog, "photos", 1, MountSource(mnt / "photos" / "v1"),
                                              transform=lambda data, labels: (bytes(data), labels["class"]))  # fmt: skip
        cached = VersionDataset.from_catalog(catalog, "photos", 1, CacheSource(config),
                                             transform=lambda data, labels: (bytes(data), labels["class"]))  # fmt: skip
        assert [mounted[i] for i in range(5)] == [cached[i] for i in range(5)]
        loader = DataLoader(mounted, batch_size=None, shuffle=True, num_workers=2)
        assert sorted(cls for _, cls in loader) == sorted(i % 3 for i in range(5))
        cached.source.close()
    catalog.close()


@pytest.mark.fuse
@pytest.mark.skipif(shutil.which("fusermount3") is None, reason="needs fuse3")
def test_hints_reach_the_mounts_cache(config: Config, tmp_path: Path) -> None:
    """A sampler's order crosses the read-only mount (as lookups) and the daemon's cache
    fetches those files before anything reads them. Without the background warm-up (on by
    default), which would cache all six files and hide what the hints fetched."""
    from datahub.torch import VersionDataset

    catalog = open_catalog(config.resolved_catalog_url)
    import_manifest(catalog, config, write_source(tmp_path / "src", 6), "photos")
    mnt = tmp_path / "mnt"
    with _mounted(config, mnt, "photos@v1", warm_up=False):
        pages = config.resolved_disk_dir / "pages"
        assert not list(pages.rglob("*.page")), "nothing read yet: the cache is empty"
        mounted = VersionDataset.from_catalog(catalog, "photos", 1, MountSource(mnt / "photos" / "v1"))
        mounted.hint([4, 0, 2])
        info = json.loads((mnt / ".datahub").read_text())
        assert info["hinted"] == {"windows": 1, "files": 3} and info["versions"] == ["photos@v1"]
        assert info["files"] == 6
        wait_until(lambda: len(list(pages.rglob("*.page"))) == 3, 60)  # the three hinted files
        assert not list(mnt.glob(".datahub-hint-*")), "hint names are never entries"
    catalog.close()


@pytest.mark.fuse
@pytest.mark.skipif(shutil.which("fusermount3") is None, reason="needs fuse3")
def test_a_mount_of_another_version_is_refused_not_read_as_this_one(config: Config, tmp_path: Path) -> None:
    """A mount shows the versions it was mounted with (``latest`` resolved at mount time). A
    VersionDataset of another version over it read that mount's files under this version's
    keys: a photo that version 2 replaced came back with version 1's bytes and version 2's
    labels, silently."""
    from datahub.torch import VersionDataset

    catalog = open_catalog(config.resolved_catalog_url)
    import_manifest(catalog, config, write_source(tmp_path / "src", 3), "photos")
    mnt = tmp_path / "mnt"
    with _mounted(config, mnt, "photos@latest"):  # shows photos/v1, and photos/latest -> v1
        other = catalog.get_record("photos", 1, "img/00002.jpg")
        replaced = replace(other, key="img/00001.jpg", labels={"class": 2})
        assert catalog.commit("photos", [Put(replaced)], message="replace a photo").seq == 2
        for directory in ("latest", "v1"):
            with pytest.raises(InvalidInput) as refused:
                VersionDataset.from_catalog(
                    catalog, "photos", "latest", MountSource(mnt / "photos" / directory)
                )
            message = refused.value.message
            assert "photos@v1" in message and "photos@v2" in message and "datahub mount" in message
        same = VersionDataset.from_catalog(catalog, "photos", 1, MountSource(mnt / "photos" / "latest"))
        cache = CacheSource(config)
        assert same.source.read(same.records[1]) == cache.read(same.records[1])
        cache.close()
        plain = VersionDataset.from_catalog(
            catalog, "photos", 1, MountSource(tmp_path / "src")
        )  # not a mount
        assert len(plain) == 3
    catalog.close()
