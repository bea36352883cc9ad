"""The policy of READs answered in C (fuse_adapter.fastread), without a mount, over a fake
of pyfuse3's fastread table (fastread.h) that owns real descriptors: every descriptor is
closed exactly once (by the table after a publish, by the policy otherwise), the bound
holds, and a file C handed back (changed) is checked again."""

from __future__ import annotations

import errno
import os

import pytest

from fuse_adapter.fastread import FastReads


class FakeTable:
    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self.files: dict[int, int] = {}  # ino -> fd
        self.hits: set[int] = set()

    def publish(self, ino: int, fd: int) -> None:
        if ino in self.files:
            raise OSError(errno.EEXIST, "published")
        if len(self.files) >= self.capacity:
            raise OSError(errno.ENOSPC, "full")
        self.files[ino] = fd

    def retract(self, ino: int) -> bool:
        fd = self.files.pop(ino, None)
        if fd is not None:
            os.close(fd)
        return fd is not None

    def retract_file(self, st_dev: int, st_ino: int) -> int:
        for ino, fd in list(self.files.items()):
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (st_dev, st_ino):
                self.retract(ino)
                return ino
        return 0

    def drain_hits(self) -> list[int]:
        out, self.hits = sorted(self.hits), set()
        return out

    def stats(self) -> dict:
        return {"files": len(self.files)}


@pytest.fixture
def page(tmp_path):
    path = tmp_path / "p.page"
    path.write_bytes(b"x" * 100)

    def fd() -> int:
        return os.open(path, os.O_RDONLY)

    return fd


def closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_the_bound_retracts_the_least_recently_published(page) -> None:
    table = FakeTable()
    fr = FastReads(table, wanted=True, max_files=3)
    for ino in (1, 2, 3, 4):
        assert fr.may_publish(ino)
        assert fr.publish(ino, page(), lambda: True)
    assert sorted(table.files) == [2, 3, 4]
    assert fr.stats()["page_files_published"] == 3


def test_a_refused_or_changed_file_is_closed_and_not_published(page) -> None:
    table = FakeTable(capacity=0)
    fr = FastReads(table, wanted=True)
    fd = page()
    assert not fr.publish(1, fd, lambda: True)  # the table is full: the policy closes fd
    assert closed(fd) and fr.refused == 1

    table = FakeTable()
    fr = FastReads(table, wanted=True)
    fd = page()
    assert not fr.publish(1, fd, lambda: False)  # changed between the check and the table's fstat
    assert closed(fd) and table.files == {}
    assert not fr.publish(2, None, lambda: True)


def test_a_read_handed_back_by_c_is_checked_again(page) -> None:
    """C retracts a changed file and hands its READ to Python: the policy must not think it
    is still published, or the file would never be published again."""
    table = FakeTable()
    fr = FastReads(table, wanted=True)
    assert fr.publish(7, page(), lambda: True)
    old = table.files[7]
    assert fr.may_publish(7)  # a READ of 7 reached Python: retracted, may be published again
    assert closed(old) and 7 not in table.files
    assert fr.publish(7, page(), lambda: True)


def test_eviction_retracts_and_off_publishes_nothing(page) -> None:
    table = FakeTable()
    fr = FastReads(table, wanted=True)
    fd = page()
    st = os.fstat(fd)
    assert fr.publish(5, fd, lambda: True)
    fr.evicted(st.st_dev, st.st_ino)
    assert table.files == {} and closed(fd)
    assert fr.may_publish(5)

    off = FastReads(FakeTable(), wanted=False, off="FUSE passthrough")
    assert off.mode == "off: FUSE passthrough" and not off.may_publish(5)
    fd = page()
    assert not off.publish(5, fd, lambda: True) and closed(fd)


def test_eviction_retracts_a_file_shared_by_several_inodes_for_all(page) -> None:
    """One page file backs several inodes when they name one object (a record kept by two
    versions, a blob of two keys); the C table's ``retract_file`` retracts one entry per
    call. Before, the eviction retracted the file for one inode: the others kept a
    descriptor of the removed file (its disk space) until a sweep."""
    table = FakeTable()
    fr = FastReads(table, wanted=True)
    fds = [page() for _ in range(3)]
    for ino, fd in zip((5, 6, 7), fds, strict=True):
        assert fr.publish(ino, fd, lambda: True)
    st = os.fstat(fds[0])
    fr.evicted(st.st_dev, st.st_ino)
    assert table.files == {} and all(closed(fd) for fd in fds)
    assert fr.published_inodes() == []
