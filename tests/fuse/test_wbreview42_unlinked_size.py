"""wbreview42: the size of a staged file with no name on a ``--passthrough`` mount.

A file unlinked (or replaced by a rename) while open answers GETATTR from what the view last
knew of it (``WorkspaceView._last``), since it has no path to stat. The kernel writes a staged
file through its passthrough handles without a WRITE, so that was the size at its open: after
the kernel's own write invalidated the attributes, ``fstat(2)`` said 0 bytes, and so did
``lseek(SEEK_END)``, so a writer appending there (a scratch file made with ``tempfile``'s
open-unlink-write) wrote over the file's first bytes. review19d asked the staged file for
WRITEs answered in C only. Fixed in ``WorkspaceView.getattr``: every staged inode's size is
its staged file's, through a handle still open.
"""

from __future__ import annotations

import os

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_workspace_review11 import _wait_passthrough
from tests.writeback.test_mount_passthrough import _staged_files_of

pytestmark = [pytest.mark.fuse, pytest.mark.usefixtures("needs_passthrough")]


def _appended_at_the_end(fd: int, body: bytes, tail: bytes) -> None:
    """What a scratch-file user does: write, find the end, append, read the whole back."""
    assert os.write(fd, body) == len(body)
    assert os.fstat(fd).st_size == len(body), "fstat of the open file without a name"
    assert os.lseek(fd, 0, os.SEEK_END) == len(body), "lseek(SEEK_END) of it"
    assert os.write(fd, tail) == len(tail)
    assert os.pread(fd, len(body) + len(tail) + 1, 0) == body + tail


def test_a_staged_file_without_a_name_keeps_its_size_and_bytes(env: FuseEnv) -> None:
    mnt = env.mountpoint("w42u")
    body, tail = os.urandom(5000), os.urandom(300)
    with env.mounted(mnt, "--workspace", "w42u", "--passthrough") as proc:
        _wait_passthrough(env, mnt)
        scratch = os.open(mnt / "scratch", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        try:
            assert _staged_files_of(proc.pid), "the file is not staged: the test checks nothing"
            os.unlink(mnt / "scratch")
            _appended_at_the_end(scratch, body, tail)
        finally:
            os.close(scratch)
        replaced = os.open(mnt / "out", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        try:
            (mnt / "new").write_bytes(b"new")
            os.rename(mnt / "new", mnt / "out")  # ``replaced`` has no name now
            _appended_at_the_end(replaced, body, tail)
        finally:
            os.close(replaced)
        assert (mnt / "out").read_bytes() == b"new"
        assert sorted(p.name for p in mnt.iterdir()) == ["out"]
