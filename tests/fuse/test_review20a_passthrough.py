"""review20a: review19d's late RELEASE on a ``--passthrough`` mount, where the daemon cannot count
the writes of a handle (the kernel writes the staged file and never says which handle did).

A file is written and closed (acknowledged) through a handle whose open file description is
also in flight in a unix socket (``SCM_RIGHTS``, never received), so its RELEASE comes only
when the socket is closed. (A mapping does not hold it here, as it does on the daemon path:
the kernel maps a passthrough file's backing file, so the munmap releases nothing of the FUSE
file.) Another handle opens it with ``O_TRUNC`` (sharing the staged file) and
rewrites it, unacknowledged; the munmap's RELEASE commits the staged file as it is, with that
rewrite in it (``WorkspaceView._changed_since_close`` is conservatively True for a staged file
with a backing file, before the fix); that handle's close then fails for the quota and "goes back to its last
fsync or close", which is now the RELEASE's commit: the acknowledged bytes are gone, and bytes
whose close returned ENOSPC are the file, after the close and after kill -9.

The RELEASE is waited for by its quota charge (``df``: a release charges a staged file's growth
before it commits), so the failing close comes after it. Fixed in
``WorkspaceView._changed_since_close``: a passthrough handle closed successfully commits nothing
at its RELEASE while another handle holds the file open (that handle's close commits or refuses it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env, wait_until
from tests.fuse.test_workspace_review11 import _kill_9, _remounted, _wait_passthrough
from tests.servers import S3Endpoint
from tests.writeback.test_mount_passthrough import _staged_files_of

pytestmark = pytest.mark.fuse

MiB = 1024**2
QUOTA = 100 * MiB  # room for staging (``STAGE_HEADROOM`` is 64 MiB)


def _used(mnt: Path) -> int:
    st = os.statvfs(mnt)
    return (st.f_blocks - st.f_bavail) * st.f_frsize


def _held_in_flight(fd: int) -> Callable[[], None]:
    """Send ``fd`` into a unix socket nobody reads: the returned call closes the socket, the
    last reference of the open file description then, so the kernel sends its RELEASE."""
    sender, receiver = socket.socketpair(socket.AF_UNIX)
    socket.send_fds(sender, [b"x"], [fd])

    def drop() -> None:
        sender.close()
        receiver.close()

    return drop


@pytest.fixture
def env(tmp_path: Path, moto_endpoint: S3Endpoint) -> FuseEnv:
    return make_env(tmp_path, moto_endpoint)


def _late_release(mnt: Path, proc, name: str, acked: bytes, rewrite: bytes) -> int:
    """``name`` written with ``acked`` and closed through a handle held in flight; then opened
    again with O_TRUNC (the same staged file) and ``rewrite`` written through that descriptor,
    unacknowledged, before the first handle's RELEASE: waited for by its quota charge. Returns
    the rewriting descriptor, still open."""
    first = os.open(mnt / name, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    assert _staged_files_of(proc.pid), "the file is not staged: the test checks nothing"
    assert os.write(first, acked) == len(acked)
    drop = _held_in_flight(first)
    os.close(first)  # FLUSH: ``acked`` is committed; the RELEASE waits for the socket
    before = _used(mnt)
    w = os.open(mnt / name, os.O_WRONLY | os.O_TRUNC)
    assert os.pwrite(w, rewrite, 0) == len(rewrite)  # the kernel writes it: not acknowledged
    drop()  # the first handle's RELEASE
    wait_until(lambda: _used(mnt) == before - len(acked) + len(rewrite), 30)  # its charge: it runs
    return w


def test_a_late_release_on_a_passthrough_mount_keeps_the_acknowledged_file(env: FuseEnv) -> None:
    """Two files: ``rel.bin``'s rewriter passes the quota and its close is refused (the file
    must read as acknowledged at once); ``unfinished.bin``'s rewriter is still writing at the
    kill -9 (the daemon path keeps the acknowledged file there; before, passthrough had the
    unfinished 512 KiB)."""
    name = "r20apt"
    mnt = env.mountpoint(name)
    acked, rewrite = os.urandom(MiB), os.urandom(3 * MiB)
    unfinished = os.urandom(MiB)
    with env.mounted(mnt, "--workspace", name, "--quota", str(QUOTA), "--passthrough") as proc:
        _wait_passthrough(env, mnt)
        still = _late_release(mnt, proc, "unfinished.bin", unfinished, os.urandom(MiB // 2))
        try:
            w = _late_release(mnt, proc, "rel.bin", acked, rewrite)
            try:
                assert os.pwrite(w, b"x", 2 * QUOTA) == 1  # sparse: charged, and refused, at w's close
            finally:
                with pytest.raises(OSError) as refused:
                    os.close(w)  # goes back to its last fsync or close
            assert refused.value.errno == errno.ENOSPC
            held = (mnt / "rel.bin").read_bytes()
            if held == rewrite:
                pytest.fail(
                    "the rewrite whose close returned ENOSPC is the file; the acknowledged bytes are gone"
                )
            assert held == acked
            _kill_9(proc)  # ``still`` is open, its rewrite unfinished
        finally:  # after the kill nothing reaches the workspace; before it, a busy unmount is slow
            with contextlib.suppress(OSError):
                os.close(still)
        files = _remounted(env, mnt, name)
        assert files["rel.bin"] == acked
        assert files["unfinished.bin"] == unfinished
