"""Large pages reach the disk tier with O_DIRECT (not through the page cache), byte-exact; a
file system without O_DIRECT (tmpfs) gets the same pages written buffered."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from datahub.cache import DiskTier, make_policy
from datahub.cache import disk as disk_module
from datahub.cache import pagefile as pagefile_module
from datahub.cache.directio import ALIGN, DIRECT_MIN_BYTES, write_direct
from datahub.cache.pages import PageKey
from tests.pagecache import resident_pages

BUDGET = 64 << 20
SIZES = [DIRECT_MIN_BYTES, DIRECT_MIN_BYTES + 1, 3 * DIRECT_MIN_BYTES + ALIGN - 7, 4 << 20]


def key(i: int) -> PageKey:
    return PageKey(f"s3://bucket/big{i}", "e", 4 << 20, 0)


def page_file(tier: DiskTier, k: PageKey) -> Path:
    return tier.dir / "pages" / k.digest[:2] / f"{k.digest}.page"


def test_write_direct_writes_exactly_header_and_data(tmp_path: Path) -> None:
    for size in (1, ALIGN - 10, ALIGN, 5 * ALIGN + 3):
        path = tmp_path / f"f{size}"
        header, data = b"H" * 77, os.urandom(size)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
        try:
            write_direct(fd, header, data, str(path))
        finally:
            os.close(fd)
        assert path.read_bytes() == header + data


@pytest.mark.parametrize("size", SIZES)
def test_large_pages_bypass_the_page_cache_and_read_back(tmp_path: Path, size: int) -> None:
    tier = DiskTier(tmp_path / "disk", BUDGET, make_policy("lru", BUDGET))
    try:
        data = os.urandom(size)
        assert tier.put(key(size), data)
        path = page_file(tier, key(size))
        assert resident_pages(path) == 0, "a large page went through the page cache"
        assert tier._direct
        assert tier.get(key(size)) == data
    finally:
        tier.close()


def test_small_pages_are_written_buffered(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path / "disk", BUDGET, make_policy("lru", BUDGET))
    try:
        data = os.urandom(100_000)
        assert tier.put(key(1), data)
        assert resident_pages(page_file(tier, key(1))) > 0
        assert tier.get(key(1)) == data
    finally:
        tier.close()


def test_a_refused_o_direct_open_writes_buffered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the file system refuses O_DIRECT at open (EINVAL: older tmpfs, some FUSE and
    network file systems), pages are written buffered from then on."""
    real_open = os.open

    def refusing_open(path, flags, *args, **kwargs):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "O_DIRECT not supported")
        return real_open(path, flags, *args, **kwargs)

    tier = DiskTier(tmp_path / "disk", BUDGET, make_policy("lru", BUDGET))
    monkeypatch.setattr(disk_module.os, "open", refusing_open)
    try:
        data = os.urandom(2 << 20)
        assert tier.put(key(2), data)
        assert not tier._direct
        assert tier.get(key(2)) == data and resident_pages(page_file(tier, key(2))) > 0
        assert tier.put(key(3), data[::-1]) and tier.get(key(3)) == data[::-1]
    finally:
        tier.close()


def test_a_refused_direct_write_is_rewritten_buffered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """O_DIRECT accepted at open but the write refused (alignment): same page, buffered."""

    def refusing_write(fd: int, header: bytes, data: bytes, what: str) -> None:
        os.write(fd, b"partial")  # whatever got written is replaced
        raise OSError(errno.EINVAL, "bad alignment")

    tier = DiskTier(tmp_path / "disk", BUDGET, make_policy("lru", BUDGET))
    monkeypatch.setattr(pagefile_module, "write_direct", refusing_write)  # the one page writer
    try:
        data = os.urandom((2 << 20) + 5)
        assert tier.put(key(4), data)
        assert not tier._direct
        assert tier.get(key(4)) == data
    finally:
        tier.close()
