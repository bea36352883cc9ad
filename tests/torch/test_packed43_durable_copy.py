"""A shard's local copy is on disk before it is named and stamped.

The copy is reused while its stamp (inode, size, mtime, ctime) matches, without hashing it. A
copy renamed into place and stamped before its data reached the disk could, after a power loss,
be a file of the right inode and size holding zeros, under a stamp that still matches: wrong
samples served without a word. So the data is fsynced before the rename (and so before the stamp).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Catalog
from datahub.config import Config
from datahub.torch import CacheSource
from tests.pack.conftest import packed_photos


@pytest.fixture
def catalog(config: Config, tmp_path: Path) -> Iterator[Catalog]:
    with packed_photos(config, tmp_path, 4) as cat:
        yield cat


def test_a_shard_copy_is_fsynced_before_it_is_renamed_into_place(
    config: Config, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datahub.torch import PackedDataset
    from datahub.torch import datasets as module

    synced: set[tuple[int, int]] = set()
    renamed: list[tuple[str, bool]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        synced.add((st.st_dev, st.st_ino))
        real_fsync(fd)

    def replace(src, dst, *args, **kwargs) -> None:
        st = os.stat(src)
        if str(dst).endswith(".lmdb"):
            renamed.append((str(dst), (st.st_dev, st.st_ino) in synced))
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(module.os, "fsync", fsync)
    monkeypatch.setattr(module.os, "replace", replace)
    source = CacheSource(config)
    try:
        ds = PackedDataset.open(catalog, source, "photos-packed", cache_dir=tmp_path / "shards")
    finally:
        source.close()
    assert len(ds) == 4
    assert renamed, "no shard copy was downloaded"
    assert all(was_synced for _, was_synced in renamed), renamed
