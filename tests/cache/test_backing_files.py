"""Format-3 page files (the page's bytes from offset 0, the header in an xattr) and the
verified backing files a FUSE passthrough open hands the kernel (datahub.cache.backing)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datahub.cache import DiskTier, make_policy
from datahub.cache import pages as fmt
from datahub.cache.backing import UNVERIFIED, BackingFiles
from datahub.cache.pages import PageKey

BUDGET = 8 << 20


def key(i: int = 0, page_size: int = 4 << 20) -> PageKey:
    return PageKey(f"s3://bucket/img{i}.jpg", '"etag"', page_size, 0)


def make_disk(tmp_path: Path) -> DiskTier:
    return DiskTier(tmp_path / "disk", BUDGET, make_policy("lru", BUDGET))


def test_a_page_file_is_exactly_the_pages_bytes_with_its_header_in_an_xattr(tmp_path: Path) -> None:
    disk = make_disk(tmp_path)
    try:
        assert disk.xattr_pages
        data = os.urandom(123_457)
        assert disk.put(key(), data)
        path = Path(disk._path(key()))
        assert path.read_bytes() == data
        header = fmt.parse_header(os.getxattr(path, fmt.XATTR))
        assert header.key() == key() and header.size == len(data)
        assert disk.get(key()) == data
        assert list(disk._scan()) == [(key(), len(data))]  # an index rebuild adopts it
    finally:
        disk.close()


def test_a_longer_or_damaged_format_3_file_is_a_miss_and_removed(tmp_path: Path) -> None:
    disk = make_disk(tmp_path)
    try:
        for i, damage in enumerate(("tail", "flip", "short")):
            data = os.urandom(5000)
            assert disk.put(key(i), data)
            path = Path(disk._path(key(i)))
            with open(path, "r+b") as f:
                if damage == "tail":
                    f.seek(0, os.SEEK_END)
                    f.write(b"x")
                elif damage == "flip":
                    f.seek(100)
                    f.write(bytes([data[100] ^ 1]))
                else:
                    f.truncate(4999)
            assert disk.get(key(i)) is None, damage
            assert not path.exists()
        assert disk.counters.corrupt == 3
    finally:
        disk.close()


def test_backing_files_are_verified_once_and_again_after_any_change(tmp_path: Path) -> None:
    disk = make_disk(tmp_path)
    try:
        data = os.urandom(70_000)
        disk.put(key(), data)
        backing = BackingFiles(disk)  # as in a later process: it did not write the file
        for _ in range(3):
            fd = backing.open(key(), len(data))
            assert fd is not None and os.pread(fd, len(data) + 1, 0) == data
            os.close(fd)
        assert backing.verifications == 1  # the first open read it whole; later ones fstat
        path = Path(disk._path(key()))
        with open(path, "r+b") as f:  # damaged after it was verified: ctime moves
            f.seek(10)
            f.write(bytes([data[10] ^ 0xFF]))
        assert backing.open(key(), len(data)) is None
        assert backing.rejected == 1 and not path.exists() and disk.counters.corrupt == 1
        assert backing.open(key(), len(data)) is None  # gone until fetched again
        disk.put(key(), data)
        fd = backing.open(key(), len(data))
        assert fd is not None and os.pread(fd, len(data), 0) == data
        os.close(fd)
    finally:
        disk.close()


def test_a_backing_file_of_another_size_than_the_object_is_refused(tmp_path: Path) -> None:
    disk = make_disk(tmp_path)
    backing = BackingFiles(disk)
    try:
        data = os.urandom(1000)
        disk.put(key(), data)
        assert backing.open(key(), 999) is None
    finally:
        disk.close()


@settings(max_examples=40, deadline=None)
@given(
    st.binary(min_size=1, max_size=3000), st.integers(min_value=0), st.integers(min_value=1, max_value=255)
)
def test_no_damaged_backing_file_is_ever_handed_out(tmp_path_factory, data: bytes, at: int, xor: int) -> None:
    """Whatever byte is changed, before or after the first verification, open() returns
    None or a file with exactly the object's bytes."""
    disk = make_disk(tmp_path_factory.mktemp("b"))
    backing = BackingFiles(disk)
    try:
        disk.put(key(), data)
        if at % 2:  # verified (and remembered) first
            fd = backing.open(key(), len(data))
            os.close(fd)
        path = Path(disk._path(key()))
        with open(path, "r+b") as f:
            f.seek(at % len(data))
            b = f.read(1)
            f.seek(at % len(data))
            f.write(bytes([b[0] ^ xor]))
        fd = backing.open(key(), len(data))
        if fd is not None:
            try:
                assert os.pread(fd, len(data) + 1, 0) == data
            finally:
                os.close(fd)
    finally:
        disk.close()


def test_without_verify_only_a_file_verified_before_and_unchanged_is_handed_out(tmp_path: Path) -> None:
    disk = make_disk(tmp_path)
    try:
        data = os.urandom(9000)
        disk.put(key(), data)
        backing = BackingFiles(disk)  # as in a later process: it did not write the file
        assert backing.open(key(), len(data), verify=False) == UNVERIFIED
        os.close(backing.open(key(), len(data)))
        fd = backing.open(key(), len(data), verify=False)
        assert fd >= 0 and os.pread(fd, len(data) + 1, 0) == data
        os.close(fd)
        os.utime(disk._path(key()))  # any change of the file moves its ctime
        assert backing.open(key(), len(data), verify=False) == UNVERIFIED
        assert backing.verifications == 1
    finally:
        disk.close()


def test_a_file_this_process_wrote_needs_no_read_back_until_it_changes(tmp_path: Path) -> None:
    """The disk tier checksummed the bytes as it wrote them: the first passthrough open of a
    cold file reads nothing back; a change afterwards is caught like any other."""
    disk = make_disk(tmp_path)
    backing = BackingFiles(disk)
    try:
        data = os.urandom(20_000)
        disk.put(key(), data)
        fd = backing.open(key(), len(data), verify=False)
        assert fd >= 0 and os.pread(fd, len(data) + 1, 0) == data
        os.close(fd)
        assert backing.verifications == 0
        with open(disk._path(key()), "r+b") as f:
            f.write(bytes([data[0] ^ 1]))
        assert backing.open(key(), len(data), verify=False) == UNVERIFIED
        assert backing.open(key(), len(data)) is None and backing.rejected == 1
    finally:
        disk.close()


def test_a_file_written_to_as_soon_as_it_is_named_is_never_counted_verified(
    tmp_path: Path, monkeypatch
) -> None:
    """Once a page file has its name any process can write it, before the writer's ``fstat``
    that records the state its bytes were checksummed in. A write landing there (a test's
    byte flip, under load, in tests/fuse/test_fastloop.py) was recorded as the verified state,
    and the file was handed to the kernel as verified for good: wrong bytes to every reader.
    The write here lands exactly there: right after the link, before the writer looks."""
    disk = make_disk(tmp_path)
    backing = BackingFiles(disk)
    data = os.urandom(20_000)
    real_link = os.link

    def link_then_flip(src, dst, *args, **kwargs):
        real_link(src, dst, *args, **kwargs)
        path = disk._path(key())
        if os.path.exists(path):  # the page file itself, by its new name (not the xattr probe)
            with open(path, "r+b") as f:
                f.seek(7)
                f.write(bytes([data[7] ^ 0x5A]))

    try:
        monkeypatch.setattr(os, "link", link_then_flip)
        disk.put(key(), data)
        monkeypatch.setattr(os, "link", real_link)
        assert backing.open(key(), len(data), verify=False) == UNVERIFIED  # not remembered as verified
        assert backing.open(key(), len(data)) is None and backing.rejected == 1  # read, checked, refused
        assert disk.get(key()) is None
    finally:
        disk.close()


@settings(max_examples=30, deadline=None)
@given(change=st.sampled_from(["none", "write", "utime", "chmod", "truncate", "evict", "closed"]))
def test_unchanged_is_true_only_for_the_verified_state(tmp_path_factory, change: str) -> None:
    """What a FUSE OPEN asks inline after the C table took a just-published file: one fstat
    of that descriptor against the verified record. Any change of the file since (bytes,
    times, mode, length, unlinked by eviction), or a descriptor no longer open, is a no."""
    disk = make_disk(tmp_path_factory.mktemp("unchanged"))
    backing = BackingFiles(disk)
    try:
        data = os.urandom(7000)
        disk.put(key(), data)
        fd = backing.open(key(), len(data), verify=False)  # written here: verified as written
        assert fd >= 0
        path = disk._path(key())
        if change == "write":
            with open(path, "r+b") as f:
                f.seek(9)
                f.write(bytes([data[9] ^ 1]))
        elif change == "utime":
            os.utime(path)
        elif change == "chmod":
            os.chmod(path, 0o600)
        elif change == "truncate":
            os.truncate(path, len(data) - 1)
        elif change == "evict":
            disk.delete(key())
        elif change == "closed":
            os.close(fd)
        assert backing.unchanged(key(), fd) is (change == "none")
        assert backing.unchanged(key(1), fd) is False  # the record of another page
        if change != "closed":
            os.close(fd)
    finally:
        disk.close()


def test_a_page_this_tier_does_not_know_is_no_backing_file_until_read(tmp_path: Path, monkeypatch) -> None:
    """A cold file's passthrough open makes no system call (the FUSE loop asks inline at
    every OPEN); a page another process stored passes through once a read found it."""
    other = make_disk(tmp_path)
    data = os.urandom(12_000)
    disk = make_disk(tmp_path)  # opened before the other process stores the page
    try:
        other.put(key(), data)
        backing = BackingFiles(disk)
        probes = []
        real_open = os.open
        monkeypatch.setattr(os, "open", lambda *a, **kw: probes.append(a[0]) or real_open(*a, **kw))
        assert backing.open(key(1), 100) is None and probes == []  # cold: nothing asked of the disk
        assert backing.open(key(), len(data)) is None and probes == []  # not known here yet
        monkeypatch.undo()
        assert disk.get(key()) == data  # the read path probes the file and finds it
        fd = backing.open(key(), len(data))
        assert fd >= 0 and os.pread(fd, len(data) + 1, 0) == data
        os.close(fd)
    finally:
        disk.close()
        other.close()


@pytest.fixture
def coarse_fs(tmp_path: Path):
    """A directory on ext2 (a loop-mounted image): a file system without multigrain
    timestamps, where every write in one clock tick stamps the same mtime and ctime, as on
    every file system before kernel 6.13. Skipped where it cannot be mounted (not root)."""
    image, target = tmp_path / "ext2.img", tmp_path / "ext2"
    target.mkdir()
    with open(image, "wb") as f:
        f.truncate(32 << 20)
    made = subprocess.run(["mkfs.ext2", "-q", "-F", str(image)], capture_output=True, text=True)
    mounted = made.returncode == 0 and (
        subprocess.run(["mount", "-o", "loop", str(image), str(target)], capture_output=True).returncode == 0
    )
    if not mounted:
        pytest.skip(f"cannot mount an ext2 image here: {made.stderr.strip() or 'mount -o loop failed'}")
    try:
        yield target
    finally:  # lazily if a descriptor handed out by a failing test still holds it
        if subprocess.run(["umount", str(target)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(target)], check=True)


def _coarse_ticks(directory: Path) -> bool:
    """Whether two writes with an fstat between them get the same mtime here (one tick),
    in most of a few tries (a tick may end between them)."""
    fd = os.open(directory / "probe", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        same = 0
        for _ in range(5):
            os.pwrite(fd, b"a", 0)
            first = os.fstat(fd).st_mtime_ns
            os.pwrite(fd, b"b", 0)
            same += os.fstat(fd).st_mtime_ns == first
        return same >= 3
    finally:
        os.close(fd)
        os.unlink(directory / "probe")


def test_a_write_in_the_same_clock_tick_is_seen_where_timestamps_are_coarse(coarse_fs: Path) -> None:
    """On a file system with coarse timestamps, a same-size write right after a page file is
    stored (or verified) stamps the mtime and ctime it already had: a state of (dev, ino,
    size, ctime) did not move, and the changed file was handed out as verified (promise 2).
    The state is taken with the mtime set in the past, where no later write can stamp it."""
    disk = DiskTier(coarse_fs / "disk", BUDGET, make_policy("lru", BUDGET))
    backing = BackingFiles(disk)
    try:
        if not (disk.xattr_pages and disk._writer.tmpfile):
            pytest.skip("ext2 here keeps no user xattrs or has no O_TMPFILE: no backing files")
        if not _coarse_ticks(coarse_fs):
            pytest.skip("this ext2 stamps fine-grained times: nothing to show")
        for i in range(20):  # a tick is milliseconds: most writes land in the store's tick
            data = os.urandom(20_000)
            disk.put(key(i), data)
            with open(disk._path(key(i)), "r+b") as f:  # same size, other bytes, at once
                f.seek(7)
                f.write(bytes([data[7] ^ 0x5A]))
            assert backing.open(key(i), len(data), verify=False) == UNVERIFIED, i
            assert backing.open(key(i), len(data)) is None, i  # read, checked, refused
        # a file verified by reading it (not written here) is settled the same way
        data = os.urandom(20_000)
        disk.put(key(99), data)
        backing.forget()
        fd = backing.open(key(99), len(data))
        assert fd is not None and fd >= 0
        os.close(fd)
        with open(disk._path(key(99)), "r+b") as f:
            f.write(bytes([data[0] ^ 1]))
        assert backing.open(key(99), len(data), verify=False) == UNVERIFIED
    finally:
        disk.close()
