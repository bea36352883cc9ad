"""A staged file keeps its reserved blocks on a file system that can share extents (xfs with
reflink, btrfs): the copy of its chunks at fsync/close is a byte copy, never shared extents.

Why (docs/writeback.md, "A full staging disk"): a staged file gets its blocks before anyone
writes them, so a ``write(2)`` inside its reservation cannot fail for space, and a failed
one shows in its size. ``copy_file_range`` on xfs is a reflink: the chunk shared the staged
file's blocks, a rewrite of committed bytes then needed new ones (copy-on-write), and on a
full disk that rewrite failed half done *inside* the reservation, with the size unchanged:
the daemon cannot see it, and the next close committed the mix of new and old bytes
(measured on this VM's Linux 6.18: 24 MiB committed, rewritten in 1 MiB writes with 12 MiB
free, failed after 11 MiB). A real xfs on a loop device, no mock.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.writeback.conftest import Env, make_env

MiB = 1 << 20
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


@pytest.fixture
def xfs(tmp_path: Path) -> Iterator[Path]:
    """A directory on a fresh 300 MiB xfs (reflink on) on a loop device over a sparse file."""
    if shutil.which("mkfs.xfs") is None:
        pytest.skip("no mkfs.xfs here")
    image, root = tmp_path / "xfs.img", tmp_path / "xfs"
    root.mkdir()
    with open(image, "wb") as f:
        f.truncate(300 * MiB)
    made = subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"mkfs.xfs failed: {made.stderr.strip()}")
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(root)], capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount an xfs image here: {mounted.stderr.strip()}")
    try:
        yield root
    finally:
        if subprocess.run(["umount", str(root)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(root)], capture_output=True)


def fill(directory: Path) -> Path:
    """Take every free block of ``directory``'s file system (``fallocate``, halving the
    request until even one block is refused); returns the filler to delete."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        offset, want = 0, 1 << 30
        while want >= 4096:
            if _libc.fallocate(fd, 0, offset, want) == 0:
                offset += want
            else:
                assert ctypes.get_errno() == errno.ENOSPC
                want //= 2
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("layout", [{}, {"writeback_pack_bytes": 0}], ids=["packs", "chunk files"])
def test_a_rewrite_of_committed_bytes_inside_the_reservation_never_fails_for_space(xfs: Path, layout) -> None:
    env: Env = make_env(xfs, page_size=4 * MiB, **layout)
    try:
        ws = env.open()
        first, second = os.urandom(8 * MiB), os.urandom(8 * MiB)
        fh = ws.open("ckpt.pt", create=True, truncate=True, staged=True)
        assert fh.staged_fd >= 0
        os.pwrite(fh.staged_fd, first, 0)
        fh.fsync()  # committed: its chunks copied into the shared tier, on the same xfs
        filler = fill(xfs)
        done = 0
        try:
            while done < len(second):  # in place, inside the reservation, as a writer does
                done += os.pwrite(fh.staged_fd, second[done : done + MiB], done)
        except OSError as exc:
            pytest.fail(f"a rewrite inside the reservation failed for space after {done:,} bytes: {exc}")
        finally:
            filler.unlink()
        fh.close()
        ws = env.crash_and_reopen(ws)
        with ws.open("ckpt.pt") as back:
            assert back.read(0, 16 * MiB) == second
    finally:
        env.close()
