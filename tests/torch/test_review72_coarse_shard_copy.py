"""review72: a shard copy written in the clock tick its state was taken in is never served.

A PackedDataset trusts a local shard copy by its state (device, inode, size, mtime, ctime):
the stamp ``_verified_copy`` writes beside it, and what every read of an open dataset
compares. A write stamps the kernel's current time, which is one clock tick coarse (4 ms at
HZ=250) before kernel 6.13 (Debian 12 runs 6.1) and on file systems without multigrain
timestamps: a same-size write in the tick a state was taken in moved nothing, and the changed
copy was served: by the open dataset, and unhashed by the next ``PackedDataset.open``. The
cache's page files had the same hole (``datahub.cache.pagefile.settled_stat``); a copy's
state is now taken with its mtime set in the past, where no later write can stamp it.
Three places take one: a download, a copy hashed again at an open, and an open dataset
hashing its mapped copy again after its state moved.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from datahub.catalog import Catalog
from datahub.config import Config
from datahub.errors import ObjectChanged
from datahub.torch import CacheSource
from tests.cache.test_backing_files import _coarse_ticks, coarse_fs  # noqa: F401 - coarse_fs: a fixture
from tests.pack.conftest import packed_photos

if TYPE_CHECKING:  # torch is imported by the test that runs, not at collection (test_collect21)
    from datahub.torch import PackedDataset

N = 6
ROUNDS = 15  # a tick is milliseconds: most writes below land in the tick of the state before them


@pytest.fixture
def catalog(config: Config, tmp_path: Path) -> Iterator[Catalog]:
    with packed_photos(config, tmp_path, N) as cat:
        yield cat


def _raw(data, labels):
    return bytes(data), labels["class"]


def _flip(path: Path, sample: bytes) -> None:
    """Another tool writes the copy in place at once: same inode and size, one byte of ``sample``."""
    data = path.read_bytes()
    at = data.find(sample) + len(sample) // 2
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(bytes([data[at] ^ 0xFF]))


def _rewrite(path: Path) -> None:
    """The copy's own bytes written over it (a restore): its state moves, its bytes do not."""
    data = path.read_bytes()
    with open(path, "r+b") as fh:
        fh.write(data)


def _served(dataset: PackedDataset, want: tuple) -> bool:
    try:
        return dataset[0] != want
    except ObjectChanged:
        return False


def test_a_copy_written_in_the_tick_of_its_state_is_never_served(
    config: Config,
    catalog: Catalog,
    coarse_fs: Path,  # noqa: F811
) -> None:
    if not _coarse_ticks(coarse_fs):
        pytest.skip("this ext2 stamps fine-grained times: nothing to show")
    from datahub.torch import PackedDataset

    source = CacheSource(config)
    served: list[tuple[str, int]] = []

    def open_(cache_dir: Path) -> PackedDataset:
        return PackedDataset.open(catalog, source, "photos-packed", cache_dir=cache_dir, transform=_raw)

    try:
        want = open_(coarse_fs / "first")[0]
        for r in range(ROUNDS):
            # a download's stamp, then a write in its tick: the open dataset and the next open
            cache_dir = coarse_fs / f"download-{r}"
            opened = open_(cache_dir)
            path = opened.readers[opened.locate(0)[0]].path
            _flip(path, want[0])
            if _served(opened, want):
                served.append(("downloaded, then read", r))
            if _served(open_(cache_dir), want):
                served.append(("downloaded, then opened again", r))
            # a copy hashed again at an open (rewritten with its own bytes), then a write in that tick
            cache_dir = coarse_fs / f"rehashed-{r}"
            first = open_(cache_dir)
            path = first.readers[first.locate(0)[0]].path
            _rewrite(path)
            open_(cache_dir)  # hashes it, stamps it
            _flip(path, want[0])
            if _served(open_(cache_dir), want):
                served.append(("hashed again at an open, then opened", r))
            # an open dataset's mapped copy hashed again (its state moved), then a write in that tick
            opened = open_(coarse_fs / f"mapped-{r}")
            assert opened[0] == want
            path = opened.readers[opened.locate(0)[0]].path
            _rewrite(path)
            assert opened[0] == want  # hashed again: the same bytes, read on
            _flip(path, want[0])
            if _served(opened, want):
                served.append(("hashed again while open, then read", r))
    finally:
        source.close()
    assert not served, f"a damaged copy was served: {served}"
