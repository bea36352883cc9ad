"""A mount holds verified page files open as published FUSE passthrough backing files
(pyfuse3's C table, fastopen.h). When the disk tier evicts one, the mount is told the
file's identity before it is unlinked, so it can let it go and the space comes back
(datahub.cache.backing listeners), and a held file that changed can be checked again."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.cache import DiskTier, make_policy
from datahub.cache.backing import BackingFiles
from datahub.cache.pages import PageKey

BUDGET = 1 << 20


def key(i: int) -> PageKey:
    return PageKey(f"s3://bucket/img{i}.jpg", '"etag"', 4 << 20, 0)


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[tuple[DiskTier, BackingFiles]]:
    disk = DiskTier(tmp_path / "disk", BUDGET, make_policy("lru", BUDGET))
    try:
        yield disk, BackingFiles(disk)
    finally:
        disk.close()


def test_evicted_page_files_are_reported_by_identity_before_they_go(
    tier: tuple[DiskTier, BackingFiles],
) -> None:
    disk, backing = tier
    told: list[tuple[int, int]] = []
    backing.listeners.append(lambda dev, ino: told.append((dev, ino)))
    data = os.urandom(300_000)
    assert disk.put(key(0), data)
    fd = backing.open(key(0), len(data))
    assert fd is not None
    try:
        st = os.fstat(fd)
        for i in range(1, 8):  # over the budget: the oldest goes
            disk.put(key(i), os.urandom(300_000))
        assert (st.st_dev, st.st_ino) in told
        assert os.fstat(fd).st_nlink == 0  # unlinked after it was reported
        assert backing.check_held(key(0), len(data), fd)  # still the verified bytes
    finally:
        os.close(fd)


def test_a_held_file_changed_in_place_fails_its_check(tier: tuple[DiskTier, BackingFiles]) -> None:
    disk, backing = tier
    data = os.urandom(5000)
    assert disk.put(key(0), data)
    fd = backing.open(key(0), len(data))
    assert fd is not None
    try:
        path = Path(disk._path(key(0)))
        os.chmod(path, 0o644)
        with open(path, "r+b") as f:
            f.seek(10)
            f.write(bytes([data[10] ^ 1]))
        assert not backing.check_held(key(0), len(data), fd)
    finally:
        os.close(fd)
