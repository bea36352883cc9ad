"""``TieredCache.passthrough.fd(fetch=True)``: a cold one-page object read in at a FUSE OPEN,
so that even its first handle gets a backing file (issue 25 item 2). A local-directory
origin, a real disk tier of format-3 page files."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.cache import open_cache
from datahub.cache.backing import ABSENT
from datahub.config import Config
from datahub.errors import ObjectChanged
from datahub.storage import StoreRegistry
from tests.cache.conftest import local_origin_cache, put_objects

PAGE = 64 * 1024


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[Config, StoreRegistry, list]]:
    with local_origin_cache(tmp_path, [1, 5000, PAGE, PAGE + 1], seed=5, page_size=PAGE) as got:
        yield got


def page_files(config: Config) -> list[Path]:
    return list((Path(config.resolved_disk_dir) / "pages").rglob("*.page"))


def test_a_cold_one_page_object_is_read_in_and_handed_out_whole(local) -> None:
    config, stores, objects = local
    with open_cache(config, stores) as cache:
        for ref, data in objects:
            if len(data) > PAGE:  # more than a page: never a backing file, nothing fetched
                assert cache.passthrough.fd(ref, verify=False) is None
                assert cache.passthrough.fd(ref, fetch=True) is None
                continue
            assert cache.passthrough.fd(ref, verify=False) == ABSENT  # inline at OPEN: cold
            fd = cache.passthrough.fd(ref, fetch=True)
            try:
                assert fd >= 0 and os.pread(fd, len(data) + 1, 0) == data
            finally:
                os.close(fd)
            fd = cache.passthrough.fd(ref, verify=False)  # written by us: known, no read back
            assert fd >= 0
            os.close(fd)
        assert len(page_files(config)) == 3
        assert cache.passthrough.backing.verifications == 0
        # each fetched file was a miss, and only the later opens of it hits (not the fetch)
        disk = cache.passthrough.backing.disk.counters.snapshot()
        assert disk.get("hits", 0) == 3, disk


def test_a_page_another_process_stored_is_not_probed_inline_and_is_handed_out(local) -> None:
    """The inline question at OPEN never touches the disk (a system call on the FUSE loop
    hands the GIL to the fetch threads, once per cold file): a page another cache on the
    same directory stored is ABSENT there, and the OPEN's fetch finds it in the disk tier
    (not at the origin, which is gone) and hands it out, checked first."""
    config, stores, objects = local
    ref, data = objects[1]
    with open_cache(config, stores) as other:
        with open_cache(config, stores) as writer:  # after ``other`` loaded its index
            writer.read(ref)
        Path(ref.url.removeprefix("file://")).unlink()  # only the disk tier has the bytes now
        with mock.patch("datahub.cache.disk.os.stat", side_effect=AssertionError("probed the disk inline")):
            assert other.passthrough.fd(ref, verify=False) == ABSENT
        fd = other.passthrough.fd(ref, fetch=True)
        try:
            assert fd >= 0 and os.pread(fd, len(data) + 1, 0) == data
        finally:
            os.close(fd)


def test_a_changed_object_raises_as_a_read_does_and_leaves_no_file(local) -> None:
    config, stores, objects = local
    with open_cache(config, stores) as cache:
        ref, _ = objects[1]
        stale = dataclasses.replace(ref, etag="not-the-etag")
        with pytest.raises(ObjectChanged) as by_read:
            cache.read(stale)
        with pytest.raises(ObjectChanged) as by_open:
            cache.passthrough.fd(stale, fetch=True)
        assert by_open.value.errno == by_read.value.errno
        assert page_files(config) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 2 * PAGE), min_size=1, max_size=6))
def test_a_fetched_backing_file_is_the_object_or_there_is_none(local, sizes: list[int]) -> None:
    """Whatever the sizes, what ``fetch=True`` hands out is exactly the object's bytes, and
    only a one-page object (not empty) ever has a file."""
    config, stores, _ = local
    store = stores.store((Path(config.home).parent / "origin").as_uri())
    with open_cache(config, stores) as cache:
        for ref, data in put_objects(store, sizes, seed=len(sizes), prefix=f"h{os.urandom(4).hex()}"):
            fd = cache.passthrough.fd(ref, fetch=True)
            if not 0 < len(data) <= PAGE:
                assert fd is None
                continue
            try:
                assert os.pread(fd, len(data) + 1, 0) == data
            finally:
                os.close(fd)
