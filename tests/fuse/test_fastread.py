"""The default read mode: zero-message opens, READs of disk-tier files answered in C.

Real mounts, the project's pyfuse3 (fastread.h) and the kernel's fuse tracepoint:
- a warm pass sends no request with a buffered open and only FUSE_IOCTL (one per file)
  with Python's default ``open()``; no OPEN or RELEASE ever;
- after the kernel dropped a file's pages, its READ is answered by pyfuse3's C threads
  from the page file (counted), the bytes are right, and the page file's own pages are
  dropped again (each byte in RAM once: the FUSE inode's page cache);
- a page file changed in place while mounted (after it was published) is never served:
  the reader gets the origin's bytes;
- ``--no-fastread`` answers those READs in Python (the benchmark baseline);
- ``--passthrough`` keeps FUSE passthrough (tests/fuse/test_passthrough.py).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from fuse_adapter.fuse_ops import FASTREAD
from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset, wait_until
from tests.fuse.fuse_tracepoint import FuseRequests
from tests.fuse.test_passthrough import FILES, GUARD, flip_byte, mount_stats, page_file_of, warm_into_disk
from tests.pagecache import resident_pages

pytestmark = pytest.mark.fuse


def test_the_fastread_build_is_installed() -> None:
    assert FASTREAD, "pyfuse3 lacks fastread.h: run scripts/build_pyfuse3.sh"


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "fr", FILES)


def forget_pages(root: Path, keys) -> None:
    """Drop the kernel's cached pages of these mounted files: their next read sends READ."""
    for key in keys:
        fd = os.open(root / key, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def published(env: FuseEnv, root: Path) -> None:
    """Every file in the disk tier and its page file published: a READ that reaches Python
    publishes it (one whose page was still in RAM only when read is published at its next
    READ, hence the loop)."""
    warm_into_disk(env, root)

    def all_published() -> bool:
        if mount_stats(env).get("page_files_published") == len(FILES):
            return True
        forget_pages(root, FILES)
        assert {key: read_buffered(root / key) for key in FILES} == FILES
        return False

    wait_until(all_published, GUARD, interval=0.5)


def read_py(path: Path) -> bytes:
    with open(path, "rb") as f:  # Python's default: isatty() -> FUSE_IOCTL
        return f.read()


def read_buffered(path: Path) -> bytes:
    with open(path, "rb", buffering=1 << 20) as f:  # no isatty()
        return f.read()


def test_reads_of_disk_tier_files_are_answered_in_c_and_cached_once(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("fr")
    with env.mounted(mnt, "fr", "--no-passthrough"):  # READs in C from the first
        root = mnt / "fr" / f"v{files.seq}"
        published(env, root)
        s = mount_stats(env, cli=True)  # as the CLI shows it
        assert s["mode"] == "off: zero-message opens" and s["reads_in_c"] == "on", s
        before = s["reads_answered_in_c"]
        page = {key: page_file_of(env, data) for key, data in FILES.items()}  # reads them: then
        os.sync()  # (dirty pages cannot be dropped)
        forget_pages(Path("/"), page.values())  # their pages are dropped, as the mount's are
        forget_pages(root, FILES)
        with FuseRequests(mnt) as req:
            got = {key: read_buffered(root / key) for key in FILES}
        assert got == FILES
        counts = req.counts()
        assert counts["FUSE_READ"] >= len(FILES), counts
        assert not counts["FUSE_OPEN"] and not counts["FUSE_RELEASE"], counts
        wait_until(lambda: mount_stats(env)["reads_answered_in_c"] - before >= counts["FUSE_READ"], GUARD)
        for key in FILES:  # the bytes once in RAM: the mount's pages, not the page file's
            assert resident_pages(page[key]) == 0, key
            assert resident_pages(root / key) > 0, key


def test_a_warm_pass_sends_no_request_with_a_buffered_open_and_ioctls_with_open(
    env: FuseEnv, files: Dataset
) -> None:
    mnt = env.mountpoint("frwarm")
    with env.mounted(mnt, "fr", "--no-passthrough"):  # READs in C from the first
        root = mnt / "fr" / f"v{files.seq}"
        warm_into_disk(env, root)
        for key in FILES:  # every file in the page cache
            read_buffered(root / key)
        with FuseRequests(mnt) as buffered:
            assert {key: read_buffered(root / key) for key in FILES} == FILES
        with FuseRequests(mnt) as plain:
            assert {key: read_py(root / key) for key in FILES} == FILES
    # page cache reclaim could turn into a READ (answered in C); nothing else may be sent
    assert set(buffered.counts()) <= {"FUSE_READ"}, buffered.counts()
    counts = plain.counts()
    assert set(counts) <= {"FUSE_IOCTL", "FUSE_READ"}, counts
    assert counts["FUSE_IOCTL"] == len(FILES), counts


def test_a_page_file_changed_while_mounted_is_never_served(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("frdmg")
    with env.mounted(mnt, "fr", "--no-passthrough"):  # READs in C from the first
        root = mnt / "fr" / f"v{files.seq}"
        published(env, root)
        forget_pages(root, FILES)
        assert {key: read_buffered(root / key) for key in FILES} == FILES  # answered in C
        victims = list(FILES)[:4]
        for i, key in enumerate(victims):
            flip_byte(page_file_of(env, FILES[key]), 1000 * i + 17)
        forget_pages(root, victims)
        for key in victims:
            assert read_buffered(root / key) == FILES[key], key
        wait_until(lambda: mount_stats(env)["page_files_changed"] >= len(victims), GUARD)
        forget_pages(root, FILES)  # fetched again and published again: right bytes, from C too
        assert {key: read_buffered(root / key) for key in FILES} == FILES


def test_no_fastread_answers_reads_in_python(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("frpy")
    with env.mounted(mnt, "fr", "--no-fastread"):
        root = mnt / "fr" / f"v{files.seq}"
        warm_into_disk(env, root)
        forget_pages(root, FILES)
        with FuseRequests(mnt) as req:
            assert {key: read_buffered(root / key) for key in FILES} == FILES
        assert Counter(req.counts())["FUSE_READ"] >= len(FILES)
        # the stats of `datahub cache stats` are a snapshot the daemon publishes now and then
        wait_until(lambda: "reads_in_c" in mount_stats(env), GUARD)
        s = mount_stats(env)
        assert s["reads_in_c"] == "off: --no-fastread" and s["reads_answered_in_c"] == 0, s
