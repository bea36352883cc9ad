"""caller31: a record whose size disagrees with its object's page file, read or opened for
passthrough, fails with ObjectChanged and leaves the page file alone.

The page file is named by the object's (URL, etag) and verified against its own checksum:
it holds the right bytes of that object. A record claiming another size is the one that is
wrong. Before, its passthrough open (``BackingFiles.open``) and its ordinary read
(``TieredCache._wrong_length``) removed the good file as corrupt, counted it so, and the
object's own record then had to fetch it again from the origin. A local-directory origin,
a real disk tier of format-3 page files.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.cache import open_cache
from datahub.config import Config
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry
from tests.cache.conftest import local_origin_cache

PAGE = 64 * 1024
CLAIMS = (4000, 6000)  # shorter and longer than the object's 5000 bytes, both one page


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[Config, StoreRegistry, list]]:
    with local_origin_cache(tmp_path, [5000], seed=31, page_size=PAGE) as got:
        yield got


def page_files(config: Config) -> dict[Path, int]:
    """Each page file of the disk tier and its inode (a removed and refetched file is another)."""
    return {p: p.stat().st_ino for p in (Path(config.resolved_disk_dir) / "pages").rglob("*.page")}


def corrupt_counts(cache) -> dict[str, int]:
    return {t.name: t.counters.snapshot().get("corrupt", 0) for t in cache.tiers}


@pytest.mark.parametrize("claim", CLAIMS)
def test_a_passthrough_open_of_a_wrong_size_keeps_the_page_file(local, claim: int) -> None:
    config, stores, objects = local
    ref, data = objects[0]
    wrong = dataclasses.replace(ref, size=claim)
    with open_cache(config, stores) as cache:
        assert cache.read(ref) == data
        before = page_files(config)
        assert len(before) == 1
        backing = cache.passthrough.backing
        assert cache.passthrough.fd(wrong, verify=False) is None  # never this record's file
        assert cache.passthrough.fd(wrong) is None
        with pytest.raises(ObjectChanged):
            cache.passthrough.fd(wrong, fetch=True)  # the open's read: the origin's answer
        assert page_files(config) == before, "the object's good page file was removed"
        assert corrupt_counts(cache) == {t.name: 0 for t in cache.tiers}
        assert backing.rejected == 0
        fd = cache.passthrough.fd(ref, verify=False)  # still the object's verified file
        try:
            assert fd >= 0 and os.pread(fd, len(data) + 1, 0) == data
        finally:
            os.close(fd)


@pytest.mark.parametrize("claim", CLAIMS)
def test_a_read_of_a_wrong_size_from_the_disk_tier_keeps_the_page_file(local, claim: int) -> None:
    """A fresh process (RAM empty) finds the page in the disk tier for the wrong record: the
    read fails with ObjectChanged, the file stays, and the object's own record reads it from
    the disk tier with the origin gone."""
    config, stores, objects = local
    ref, data = objects[0]
    wrong = dataclasses.replace(ref, size=claim)
    with open_cache(config, stores) as cache:
        assert cache.read(ref) == data
    before = page_files(config)
    with open_cache(config, stores) as cache:
        with pytest.raises(ObjectChanged):
            cache.read(wrong)
        with pytest.raises(ObjectChanged):
            cache.read(wrong)  # and again, now that RAM may hold it
        assert page_files(config) == before, "the object's good page file was removed"
        assert corrupt_counts(cache) == {t.name: 0 for t in cache.tiers}
        Path(ref.url.removeprefix("file://")).unlink()  # only the cache has the bytes now
        assert cache.read(ref) == data


def test_a_page_file_replaced_by_another_objects_of_another_size_is_rejected(tmp_path: Path) -> None:
    """The exception above holds only for a header naming this very page: another object's
    valid page file renamed over this one's name (another size) is damage, rejected, counted
    and removed, and a read gives the object's bytes (CI stop 65 failed on this in
    tests/fuse/test_integrity15.py's ``replaced`` case: the size check came first and let the
    wrong file stay)."""
    with local_origin_cache(tmp_path, [5000, 7000], seed=65, page_size=PAGE) as (config, stores, objects):
        (ref, data), (other, _) = objects
        with open_cache(config, stores) as cache:
            assert cache.read(ref) == data and cache.read(other)
            fd = cache.passthrough.fd(ref)
            os.close(fd)
            files = {p.stat().st_size: p for p in page_files(config)}
            mine, theirs = files[5000], files[7000]
            swap = mine.with_suffix(".swap")
            swap.write_bytes(theirs.read_bytes())
            os.setxattr(swap, "user.datahub.page", os.getxattr(theirs, "user.datahub.page"))
            os.rename(swap, mine)
            backing = cache.passthrough.backing
            assert cache.passthrough.fd(ref) is None
            assert backing.rejected == 1
            assert sum(corrupt_counts(cache).values()) == 1
            assert not mine.exists() or mine.stat().st_size != 7000, "the wrong file stayed"
            assert cache.read(ref) == data
