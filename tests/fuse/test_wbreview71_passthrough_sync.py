"""wbreview71: the two synchronous writes a ``--passthrough`` mount cannot make durable per
write (docs/writeback.md, "O_SYNC and O_DSYNC"), measured on Linux 6.18.44: an ``O_SYNC`` write
through a second open of a file another handle holds staged, and ``pwritev2(RWF_DSYNC)`` on a
staged file. The kernel writes and syncs the backing file and sends the daemon nothing, and a
passthrough inode takes no open without passthrough; after a kill -9 both files hold what their
last fsync committed. Strict xfails: if a kernel ever lets the daemon see these writes, they
pass, and the docs must say so.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env
from tests.fuse.test_workspace_review11 import _kill_9, _remounted, _wait_passthrough
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse


@pytest.fixture
def env(tmp_path: Path, moto_endpoint: S3Endpoint) -> FuseEnv:
    from fuse_adapter import fuse_ops

    if not fuse_ops.PASSTHROUGH:
        pytest.skip("pyfuse3 built without libfuse >= 3.16")
    return make_env(tmp_path, moto_endpoint)


@pytest.mark.xfail(
    strict=True, reason="passthrough: the kernel syncs the staged file, the daemon sees no write"
)
@pytest.mark.parametrize("how", ["o_sync-open-of-a-staged-file", "rwf_dsync"])
def test_a_sync_write_to_a_staged_file_survives_kill_9(env: FuseEnv, how: str) -> None:
    name = "w71ptsync"
    mnt = env.mountpoint(name)
    held: list[int] = []
    try:
        with env.mounted(mnt, "--workspace", name, "--passthrough") as proc:
            _wait_passthrough(env, mnt)
            staged = os.open(mnt / "f.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            held.append(staged)
            assert os.write(staged, b"x" * 10) == 10
            os.fsync(staged)  # acknowledged: "xxxxxxxxxx"
            if how == "rwf_dsync":
                assert os.pwritev(staged, [b"SYNC"], 0, os.RWF_DSYNC) == 4
            else:
                second = os.open(mnt / "f.log", os.O_WRONLY | os.O_SYNC)
                held.append(second)
                assert os.pwrite(second, b"SYNC", 0) == 4
            _kill_9(proc)  # no close, no fsync after the synchronous write
            got = _remounted(env, mnt, name)
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)  # the mount is gone: ENOTCONN
    assert got.get("f.log") == b"SYNCxxxxxx"
