"""A refused close whose revert fails leaves a ``--quota`` counting the file as it now reads
(docs/writeback.md, "Out of space at close"; docs/fuse.md, "--quota").

A staged file's close refused for space reverts it (``WorkspaceView._revert``), which refunds
what the file was charged and charges its acknowledged size. A revert that cannot write the
acknowledged bytes back (here: their chunks unreadable, the shared tier down) raises after
cutting the file to that size, and the RELEASE then lets the file go: every later open reads
the journal's record. Before, the raise skipped the quota's step, so the quota stayed charged
with the failed write's bytes, which no file held any more: ``df`` showed them used (here
~1 MB more than the file holds, for each such close), and a later write that fitted the
quota with them gone was refused with ENOSPC.

Real mount (``--passthrough``: the kernel writes the staged file, charged at the close),
staging on a real 2 MiB tmpfs (``_staging_on``), the shared tier on moto behind a loopback
proxy that refuses connections (``bench/outage_proxy.py``) for the close and its RELEASE."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.outage_proxy import OutageProxy
from tests.fuse.conftest import FuseEnv, wait_until
from tests.fuse.test_remount import _staging_on
from tests.fuse.test_workspace_nospace import _write_all
from tests.fuse.test_wrongbytes74_restore_outage import _free, _through
from tests.writeback import test_faults

pytestmark = pytest.mark.fuse
tiny_fs = test_faults.tiny_fs  # a real 2 MiB tmpfs


def _reads(path: Path, want: bytes) -> bool:
    return path.read_bytes() == want


QUOTA = 80_000_000  # past STAGE_HEADROOM (64 MiB): the files are staged


def test_a_failed_revert_leaves_the_quota_charged_with_what_the_file_holds(
    env: FuseEnv, tiny_fs: Path, moto_endpoint
) -> None:
    name = "revert-quota"
    mnt = _staging_on(env, tiny_fs, name)
    with OutageProxy(moto_endpoint.url) as proxy:
        _through(env, proxy)
        old = os.urandom(1_000_000)
        with env.mounted(mnt, "--workspace", name, "--passthrough", "--quota", str(QUOTA)):
            (mnt / "f.bin").write_bytes(old)  # acknowledged by its close: its chunk is in S3
            wait_until(lambda: _free(tiny_fs) > 1_900_000, 10)  # its staged file let go (RELEASE)
            fd = os.open(mnt / "f.bin", os.O_WRONLY | os.O_TRUNC)
            _write_all(fd, os.urandom(3_000_000), fails=True)  # ~2 MB in (charged), then the tmpfs is full
            proxy.set_mode("refuse")  # the revert at the close cannot read the chunk back
            with pytest.raises(OSError):
                os.close(fd)
            wait_until(lambda: _free(tiny_fs) > 1_900_000, 20)  # the RELEASE let the staged file go
            proxy.set_mode("up")
            assert (mnt / "f.bin").read_bytes() == old
            st = os.statvfs(mnt)
            # main: ~2 MB of the quota charged for the failed write's bytes, not 1 MB
            assert st.f_bavail * st.f_frsize >= QUOTA - len(old) - st.f_frsize


def test_a_revert_with_no_room_leaves_the_quota_charged_with_the_acknowledged_size(
    env: FuseEnv, tiny_fs: Path
) -> None:
    """The other way round: the failed write left less than the file acknowledged (a full
    staging disk from the start), and the revert finds no block to write the acknowledged
    1 MB back (``StagedFile._restore``: unrestored, NoSpace). The file reads as its 1 MB once
    closed everywhere; before, the quota counted the ~100 KB the failed write had left, so
    the workspace could hold ~0.9 MB more than its quota for each such close."""
    name = "revert-quota-room"
    mnt = _staging_on(env, tiny_fs, name)
    old = os.urandom(1_000_000)
    with env.mounted(mnt, "--workspace", name, "--passthrough", "--quota", str(QUOTA)):
        log = env.root / f"mount-{mnt.name}.log"
        (mnt / "f.bin").write_bytes(old)
        wait_until(lambda: _free(tiny_fs) > 1_500_000, 10)  # its staged file let go (RELEASE)
        ballast = test_faults.fill(tiny_fs, 100_000)
        fd = os.open(mnt / "f.bin", os.O_WRONLY | os.O_TRUNC)  # staged anew, on the full device
        _write_all(fd, os.urandom(3_000_000), fails=True)  # ~100 KB in
        with pytest.raises(OSError):
            os.close(fd)  # its revert cannot write the 1 MB back: no blocks left
        assert "to restore its last acknowledged 1,000,000 bytes" in log.read_text()
        wait_until(lambda: _reads(mnt / "f.bin", old), 15)  # closed everywhere
        st = os.statvfs(mnt)
        # main: ~100 KB charged for a file of 1 MB
        assert st.f_bavail * st.f_frsize <= QUOTA - len(old) + st.f_frsize
        ballast.unlink()
