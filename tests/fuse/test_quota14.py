"""quota14: a file whose name went while it was open keeps its quota charge until its last close.

As on ext4, where an unlinked file's blocks stay allocated (and counted by ``df``) while a
descriptor holds it, a workspace mount's quota (``--quota``) goes on counting such a file,
charged as any file (``WorkspaceView._nameless``). Before, its size left the count with its
name, so bytes below that size were refilled uncharged, and with ``--passthrough`` its growth
was never charged at all.
"""

from __future__ import annotations

import errno
import os

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_review14b import _charged_back_to
from tests.fuse.test_review14wb import BIG_QUOTA, _available
from tests.fuse.test_workspace_nospace import FLAGS
from tests.fuse.test_workspace_review11 import _wait_passthrough

pytestmark = pytest.mark.fuse


def _blocks(nbytes: int) -> int:
    """What ``df`` shows of ``nbytes`` charged: whole 4 KiB blocks (``Quota.df``)."""
    return -(-nbytes // 4096) * 4096


@pytest.mark.parametrize("how", ["unlink", "rename"])
@pytest.mark.parametrize("flags", FLAGS)
def test_df_counts_a_file_whose_name_went_until_its_last_close(env: FuseEnv, flags: str, how: str) -> None:
    """Written and fsynced (charged, staged or not), then unlinked, or replaced by a rename,
    while open: ``df`` still counts its bytes, through a second descriptor's close too, and
    gives them back at the last close. Before, ``df`` dropped them when the name went while
    the daemon still held them."""
    name = f"q14-df-{flags}-{how}"
    mnt = env.mountpoint(name)
    data = os.urandom(4 * 1024**2)
    with env.mounted(mnt, "--workspace", name, "--quota", str(BIG_QUOTA), *FLAGS[flags]):
        if flags == "passthrough":
            _wait_passthrough(env, mnt)
        whole = _available(mnt)
        fd = os.open(mnt / "held.bin", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        other = os.open(mnt / "held.bin", os.O_RDONLY)
        left = 0  # what the workspace holds by name at the end
        try:
            assert os.write(fd, data) == len(data)
            os.fsync(fd)
            if how == "unlink":
                os.unlink(mnt / "held.bin")
            else:
                (mnt / "new.bin").write_bytes(b"new")
                os.rename(mnt / "new.bin", mnt / "held.bin")
                left = 3
            assert whole - _available(mnt) == _blocks(len(data) + left), "the open file left the quota"
            os.close(other)
            other = -1
            assert _charged_back_to(mnt, whole, _blocks(len(data) + left)) == _blocks(len(data) + left)
            assert os.pread(fd, len(data), 0) == data
        finally:
            if other >= 0:
                os.close(other)
            os.close(fd)
        assert _charged_back_to(mnt, whole, _blocks(left)) == _blocks(left), (
            "its last close did not refund it"
        )


def test_a_staged_file_unlinked_while_open_cannot_pass_the_quota(env: FuseEnv) -> None:
    """With ``--passthrough`` the kernel writes a staged file without asking; its growth is
    charged at each fsync and close (a truncate at once), after its unlink too. A truncate
    past the quota is refused; one byte written past it into an unlinked staged file: its
    fsync and its close fail with ENOSPC, and ``df`` is
    whole after the close. Before, an unlinked staged file's growth was never charged: both
    returned 0 with the file holding more than the quota."""
    name = "q14-staged-unlinked"
    mnt = env.mountpoint(name)
    with env.mounted(mnt, "--workspace", name, "--quota", str(BIG_QUOTA), "--passthrough"):
        _wait_passthrough(env, mnt)
        whole = _available(mnt)
        fd = os.open(mnt / "scratch", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        try:
            os.unlink(mnt / "scratch")
            with pytest.raises(OSError) as grown:  # a truncate is charged at once, as a named file's
                os.ftruncate(fd, 2 * BIG_QUOTA)
            assert grown.value.errno == errno.ENOSPC
            assert os.pwrite(fd, b"x", BIG_QUOTA) == 1  # the kernel writes it: nothing can refuse it
            with pytest.raises(OSError) as fsync:
                os.fsync(fd)
            assert fsync.value.errno == errno.ENOSPC
        finally:
            with pytest.raises(OSError) as close:  # close(2) lets the descriptor go even when it fails
                os.close(fd)
        assert close.value.errno == errno.ENOSPC
        assert _charged_back_to(mnt, whole) == 0
