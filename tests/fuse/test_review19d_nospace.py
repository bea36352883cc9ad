"""review19d: WRITEs answered in C (writec19; fastwrite.h) on a full staging disk. One real
``--writes-in-c`` mount whose staged files live on a small tmpfs (as
``tests/fuse/test_remount.py``'s ``_staging_on``: the journal and the shared tier have room).

What must hold (docs/writeback.md, "WRITEs answered in C", and review15wb's rule for a
dropped cached WRITE): no file is committed torn, neither by the writer whose WRITE failed
for space nor by a handle opened after that failure.
"""

from __future__ import annotations

import errno
import mmap
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, make_env
from tests.servers import S3Endpoint
from tests.tmpfs import small_tmpfs
from tests.writeback import test_faults

pytestmark = pytest.mark.fuse

WS = "r19dnospace"
KiB = 1024


class Mounted:
    def __init__(self, env: FuseEnv, mnt: Path, tiny: Path, proc: subprocess.Popen) -> None:
        self.env, self.mnt, self.tiny, self.proc = env, mnt, tiny, proc

    def committed(self, name: str) -> bytes | None:
        """What a fresh lookup finds (a revert gives the path a new inode: no cached pages)."""
        path = self.mnt / name
        return path.read_bytes() if path.exists() else None


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint) -> Iterator[Mounted]:
    root = tmp_path_factory.mktemp("r19dnospace")
    with small_tmpfs(root / "tiny", "2m") as tiny:
        env = make_env(root / "home", moto_endpoint)
        with open(env.config_path, "a") as fh:  # [cache] is the config's last section
            fh.write(f'shared_url = "s3://{env.bucket}/shared"\n')  # staged files beside the journal
        staging = env.config.resolved_journal_dir / "workspaces" / WS / "staging"
        staging.parent.mkdir(parents=True)
        staging.symlink_to(tiny)
        mnt = env.mountpoint("ws")
        with env.mounted(mnt, "--workspace", WS, "--writes-in-c") as proc:
            os.listdir(mnt)
            yield Mounted(env, mnt, tiny, proc)


def test_a_write_in_c_that_fails_for_space_is_never_committed_torn(full: Mounted) -> None:
    data = os.urandom(1_500_000)
    ballast = test_faults.fill(full.tiny, 400_000)
    try:
        fd = os.open(full.mnt / "torn.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        written = 0
        with pytest.raises(OSError) as exc:
            while written < len(data):
                written += os.write(fd, data[written:])
        assert exc.value.errno == errno.ENOSPC and written < len(data)
        with pytest.raises(OSError) as closed:
            os.close(fd)
        assert closed.value.errno == errno.ENOSPC
    finally:
        ballast.unlink()
    assert full.committed("torn.bin") in (None, data)


def test_a_handle_opened_after_a_mappings_write_back_failed_for_space_is_refused(full: Mounted) -> None:
    """A shared mapping's pages come back as cached WRITEs (FUSE_WRITE_CACHE), which C hands to
    Python; into a sparse staged file on a full disk they fail for space. A handle opened
    after that must not commit the file without them (review15wb's rule)."""
    acked = b"a" * (64 * KiB)
    fd = os.open(full.mnt / "mapped.bin", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    closes: list[int] = []

    def close(fd: int) -> None:
        try:
            os.close(fd)
            closes.append(0)
        except OSError as exc:
            closes.append(exc.errno)

    try:
        assert os.write(fd, acked) == len(acked)
        os.fsync(fd)  # acknowledged: what the file goes back to
        os.ftruncate(fd, 1024 * KiB)  # a hole: its blocks come at the write-back
        ballast = test_faults.fill(full.tiny, 0)
        more = test_faults.fill_up(full.tiny)
        try:
            # (Python's mmap holds a dup of ``fd``: its close is a FLUSH of the mapper's handle,
            # which reverts the file; the late handle opens and closes before that)
            with mmap.mmap(fd, 1024 * KiB) as m:
                m[64 * KiB :] = b"m" * (960 * KiB)
                with pytest.raises(OSError):
                    m.flush()  # msync: the cached WRITEs fail for space in Python
                late = os.open(full.mnt / "mapped.bin", os.O_WRONLY)  # after the failure
                close(late)
        finally:
            more.unlink()
            ballast.unlink()
    finally:
        close(fd)
    got = full.committed("mapped.bin")
    assert got == acked, f"committed {len(got or b'')} bytes, {got.count(0) if got else 0} of them zeros"
    assert 0 not in closes, closes  # the late handle's close and the mapper's: both refused


def test_kill_9_mid_write_keeps_what_was_acknowledged_and_nothing_else(full: Mounted) -> None:
    """Last: it ends the module's mount. One file closed, one fsynced then written on in C,
    then kill -9: a fresh mount shows the closed file whole and the other as its fsync left
    it (an unacknowledged staged file is an O_TMPFILE: nothing of it survives)."""
    closed, synced = os.urandom(100_000), os.urandom(64 * KiB)
    (full.mnt / "closed.bin").write_bytes(closed)
    fd = os.open(full.mnt / "open.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    assert os.write(fd, synced) == len(synced)
    os.fsync(fd)
    assert os.pwrite(fd, b"x" * (200 * KiB), 0) == 200 * KiB  # answered in C, never acknowledged
    full.proc.send_signal(signal.SIGKILL)
    full.proc.wait(timeout=30)
    try:
        os.close(fd)
    except OSError:
        pass  # the daemon is gone: nothing of this close is acknowledged
    full.env.cli("mount", str(full.mnt), "--workspace", WS, "--background")
    try:
        assert (full.mnt / "closed.bin").read_bytes() == closed
        assert (full.mnt / "open.bin").read_bytes() == synced
    finally:
        full.env.cli("umount", str(full.mnt))
