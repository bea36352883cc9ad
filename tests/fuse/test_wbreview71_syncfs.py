"""wbreview71: what ``syncfs(2)`` and ``sync(2)`` send a workspace mount's daemon, counted by
the kernel's fuse tracepoint (tests/fuse/fuse_tracepoint.py), so that docs/writeback.md's
"Limits" (``sync`` commits nothing) rests on a measurement of the running kernel, not a guess.

Linux sends ``FUSE_SYNCFS`` only to a connection that asks for it (``fc->sync_fs``, which only
virtiofs sets), so a FUSE daemon never hears of a ``sync``: on 6.18 a ``syncfs`` of the mount
sent no SYNCFS and no FSYNC, with a file open and written and never fsync'd. If a kernel ever
sends SYNCFS here, this test fails, and the daemon should then commit open files at it.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env
from tests.fuse.fuse_tracepoint import FuseRequests, available
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse


@pytest.fixture
def env(tmp_path: Path, moto_endpoint: S3Endpoint) -> FuseEnv:
    return make_env(tmp_path, moto_endpoint)


@pytest.mark.parametrize("flags", [(), ("--writeback-cache",)], ids=["daemon", "writeback-cache"])
def test_syncfs_and_sync_send_a_workspace_daemon_no_syncfs_and_no_fsync(
    env: FuseEnv, flags: tuple[str, ...]
) -> None:
    if why := available():
        pytest.fail(why)
    libc = ctypes.CDLL(None, use_errno=True)
    name = "w71syncfs"
    mnt = env.mountpoint(name)
    with env.mounted(mnt, "--workspace", name, *flags):
        fd = os.open(mnt / "open.log", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"written, never fsync'd\n")
            with FuseRequests(mnt, name=f"datahub-test-{os.getpid()}") as req:
                assert libc.syncfs(fd) == 0, os.strerror(ctypes.get_errno())
                os.sync()
            sent = req.counts()
        finally:
            os.close(fd)
    assert "FUSE_SYNCFS" not in sent and "FUSE_FSYNC" not in sent, dict(sent)
