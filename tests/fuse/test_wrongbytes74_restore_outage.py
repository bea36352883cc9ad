"""A refused close whose revert cannot read the file's acknowledged chunks back (the shared
tier down) leaves nothing torn to read or to commit (docs/writeback.md, "Out of space at close").

A staged file's revert cuts it to its acknowledged size and writes the acknowledged chunks
back in place (``StagedFile._restore``), read from the shared tier. Before, only a failure for
space left it ``unrestored`` (committed by nothing): a chunk read that failed (S3 refusing
connections) left the failed write's bytes, then zeros, in a file nothing marked, and the
RELEASE's second revert raised too and skipped the handle's close, so the mount kept it. After
the shared tier came back, every open read it, and with ``--writes-in-c`` the next close of
another handle (one byte written) returned 0 and committed it: an acknowledged 1 MB file
became the failed write's first 98 KB, zeros, and that byte.

Real mounts: staging on a real 2 MiB tmpfs (``_staging_on``), the shared tier on moto behind a
loopback proxy that refuses connections (``bench/outage_proxy.py``) for the close and its
RELEASE."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from bench.outage_proxy import OutageProxy
from tests.fuse.conftest import FuseEnv, wait_until
from tests.fuse.test_remount import _committed, _staging_on
from tests.fuse.test_workspace_nospace import _write_all
from tests.writeback import test_faults

pytestmark = pytest.mark.fuse
tiny_fs = test_faults.tiny_fs  # a real 2 MiB tmpfs

FLAGS = {"passthrough": "--passthrough", "writes-in-c": "--writes-in-c"}


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _through(env: FuseEnv, proxy: OutageProxy) -> None:
    """The mount's S3 (its shared tier) through ``proxy``, giving up after two tries in 1 s."""
    text = re.sub(r'endpoint_url = ".*"', f'endpoint_url = "{proxy.url}"', env.config_path.read_text())
    text = text.replace("max_attempts = 3\n", "max_attempts = 2\nread_timeout = 60.0\ntotal_timeout = 1.0\n")
    env.config_path.write_text(text)


@pytest.mark.parametrize("flags", FLAGS)
def test_a_revert_that_cannot_read_the_acknowledged_chunks_leaves_nothing_torn(
    env: FuseEnv, tiny_fs: Path, moto_endpoint, flags: str
) -> None:
    name = f"restore-outage-{flags}"
    mnt = _staging_on(env, tiny_fs, name)  # the shared tier on S3, staged files on the tmpfs
    with OutageProxy(moto_endpoint.url) as proxy:
        _through(env, proxy)
        old = os.urandom(1_000_000)
        with env.mounted(mnt, "--workspace", name, FLAGS[flags]):
            log = env.root / f"mount-{mnt.name}.log"
            (mnt / "f.bin").write_bytes(old)  # acknowledged by its close: its chunk is in S3
            wait_until(lambda: _free(tiny_fs) > 1_500_000, 10)  # its staged file let go (RELEASE)
            ballast = test_faults.fill(tiny_fs, 100_000)
            fd = os.open(mnt / "f.bin", os.O_WRONLY | os.O_TRUNC)  # staged anew, on the full device
            _write_all(fd, os.urandom(3_000_000), fails=True)
            proxy.set_mode("refuse")  # the revert at the close cannot read the chunk back
            with pytest.raises(OSError):
                os.close(fd)
            # its RELEASE (after the close) meets the outage too
            wait_until(
                lambda: "release failed" in log.read_text() or "without a commit" in log.read_text(), 20
            )
            proxy.set_mode("up")
            ballast.unlink()
            assert (mnt / "f.bin").read_bytes() == old  # main: the failed write's bytes, then zeros
            fd = os.open(mnt / "f.bin", os.O_WRONLY)
            os.pwrite(fd, b"Z", len(old) - 1)
            os.close(fd)  # main, --writes-in-c: 0, committing the torn file with its Z
            assert (mnt / "f.bin").read_bytes() == old[:-1] + b"Z"
        assert _committed(env, mnt, name, "f.bin") == old[:-1] + b"Z"


@pytest.mark.parametrize("flags", FLAGS)
def test_an_fsync_of_a_reader_never_commits_a_file_whose_revert_failed(
    env: FuseEnv, tiny_fs: Path, moto_endpoint, flags: str
) -> None:
    """A reader holds the file open across the refused closes and the writer's RELEASE, then
    fsyncs it once the shared tier is back: the staged file is still the torn one, and an
    fsync commits the file as it is (docs/writeback.md, "A reader's close commits nothing").
    It must be refused (ENOSPC: nothing committed) and the file read as acknowledged. Before,
    the fsync returned 0 and the torn file was the workspace's, after the unmount too."""
    name = f"restore-reader-{flags}"
    mnt = _staging_on(env, tiny_fs, name)
    with OutageProxy(moto_endpoint.url) as proxy:
        _through(env, proxy)
        old = os.urandom(1_000_000)
        with env.mounted(mnt, "--workspace", name, FLAGS[flags]):
            log = env.root / f"mount-{mnt.name}.log"
            (mnt / "f.bin").write_bytes(old)
            wait_until(lambda: _free(tiny_fs) > 1_500_000, 10)
            ballast = test_faults.fill(tiny_fs, 100_000)
            fd = os.open(mnt / "f.bin", os.O_WRONLY | os.O_TRUNC)
            _write_all(fd, os.urandom(3_000_000), fails=True)
            again = os.dup(fd)  # the handle's RELEASE waits for this one's close
            proxy.set_mode("refuse")
            with pytest.raises(OSError):
                os.close(fd)
            reader = os.open(mnt / "f.bin", os.O_RDONLY)  # after the revert: never made short
            try:
                with pytest.raises(OSError):
                    os.close(again)
                wait_until(
                    lambda: "release failed" in log.read_text() or "without a commit" in log.read_text(), 20
                )
                proxy.set_mode("up")
                ballast.unlink()
                with pytest.raises(OSError) as refused:
                    os.fsync(reader)  # main: 0, the torn file committed
                assert refused.value.errno == errno.ENOSPC
            finally:
                os.close(reader)
            assert (mnt / "f.bin").read_bytes() == old
        assert _committed(env, mnt, name, "f.bin") == old
