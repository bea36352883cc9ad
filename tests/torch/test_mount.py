"""VersionDataset over a real ``datahub mount`` reads the same bytes as through the cache."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from datahub.catalog import open_catalog
from datahub.config import Config
from datahub.torch import CacheSource, MountSource, VersionDataset
from datahub.torch._torch import DataLoader
from tests.fuse.conftest import wait_until
from tests.pack.conftest import import_manifest, write_source

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
    catalog = open_catalog(config.resolved_catalog_url)
    import_manifest(catalog, config, write_source(tmp_path / "src", 5), "photos")
    mnt = tmp_path / "mnt"
    with _mounted(config, mnt, "photos@v1"):
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
