"""review17a: warm16's sweep of the C tables (``passthrough_sweep`` / ``fastread_sweep``)
attacked with a page file that another process replaces, at the same path, by a file of other
bytes (its xattrs copied, so only its bytes tell) between sweeps, while a passthrough handle
holds the old file's backing id.

Promise 2 (a changed page file is never served): the handle open before keeps the old file
(its inode: the right bytes); the sweep lets the old entry go without anything opening it;
every later open, read and mapping of the inode gives the object's bytes, never the
replacement's; and the replacement is rejected when a read first meets it. These pass.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset, wait_until
from tests.fuse.test_evicted_elsewhere import LET_GO
from tests.fuse.test_evicted_published import _published
from tests.fuse.test_fastread import forget_pages, read_buffered
from tests.fuse.test_passthrough import FILES, GUARD, page_file_of, page_files, warm_into_disk
from tests.fuse.ticks import short_ticks

pytestmark = pytest.mark.fuse


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(short_ticks(env), "rp", FILES)  # the sweep comes a tick after the swap


def _replace_with_other_bytes(path: Path) -> bytes:
    """What another process sharing the disk directory could leave at ``path``: a new file of
    the same size and xattrs but other bytes, renamed over the old one (which it unlinks)."""
    old = path.read_bytes()
    other = bytes(b ^ 0x5A for b in old)
    tmp = path.with_name(path.name + ".other")
    tmp.write_bytes(other)
    for name in os.listxattr(path):
        os.setxattr(tmp, name, os.getxattr(path, name))
    os.utime(tmp, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))
    os.rename(tmp, path)
    return other


@pytest.mark.parametrize(
    ("args", "key", "swept"),
    [
        (("--no-passthrough",), "page_files_published", "page_files_swept"),
        (("--passthrough",), "published", "backing_files_swept"),
    ],
    ids=["fastread", "passthrough"],
)
def test_a_page_file_replaced_by_other_bytes_between_sweeps_is_never_served(
    env: FuseEnv, files: Dataset, args: tuple[str, ...], key: str, swept: str
) -> None:
    mnt = env.mountpoint("rp")
    victim, data = next(iter(FILES.items()))
    with env.mounted(mnt, "rp", *args):
        root = mnt / "rp" / f"v{files.seq}"
        warm_into_disk(env, root)

        def all_published() -> bool:
            forget_pages(root, FILES)
            assert {k: read_buffered(root / k) for k in FILES} == FILES
            return _published(env, key) == len(FILES)

        wait_until(all_published, GUARD, interval=0.5)
        held = os.open(root / victim, os.O_RDONLY)  # passthrough: holds the backing id
        try:
            other = _replace_with_other_bytes(page_file_of(env, data))
            wait_until(lambda: _published(env, swept) >= 1, LET_GO, interval=0.5)  # nothing opened it
            assert os.pread(held, len(data) + 1, 0) == data
            forget_pages(root, [victim])
            assert read_buffered(root / victim) == data
            fd = os.open(root / victim, os.O_RDONLY)
            try:
                assert os.pread(fd, len(data) + 1, 0) == data
                with mmap.mmap(fd, len(data), prot=mmap.PROT_READ) as m:
                    assert m[:] == data
            finally:
                os.close(fd)
        finally:
            os.close(held)
        forget_pages(root, [victim])
        assert read_buffered(root / victim) == data
        assert {k: read_buffered(root / k) for k in FILES} == FILES
        # the replacement was met, rejected and removed (fetched again: the page file holds data)
        wait_until(lambda: all(p.read_bytes() != other for p in page_files(env)), GUARD, interval=0.5)
