"""Zero-message opens: once files are warm, opening and reading them never enters the daemon.

This is the mount's mode with ``--no-passthrough``, and its fallback when FUSE passthrough
is unavailable (docs/fuse.md "Reads"); passthrough itself needs OPEN and RELEASE.

The daemon answers the first OPEN with ENOSYS, and the kernel then opens every file of the
mount itself, keeping its page cache (datahub's pyfuse3 build hands ``read`` the inode).
The proof is behavioural: with the daemon stopped (SIGSTOP), warm files still open, read
and close; any request to the daemon would block until it is continued. (Python's
buffered ``open()`` also asks ``isatty``, an ioctl FUSE always forwards; libfuse answers it
in C without reaching our code, so the test uses plain ``os.open``/``os.read``.)

The warm pages are mlocked for the stopped phase: kernel reclaim (this VM runs DAMON
``pageout`` on physical regions, which can take freshly read page cache) would otherwise
send a READ to the stopped daemon, and that is memory pressure, not an open or read path
that enters the daemon. The mapping also pins the files' dentries and inodes.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from fuse_adapter.fuse_ops import NO_OPEN_FH
from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset
from tests.pagecache import pinned_in_page_cache, read_unbuffered

pytestmark = pytest.mark.fuse


def test_datahub_pyfuse3_build_is_installed() -> None:
    assert NO_OPEN_FH is not None, "pyfuse3 lacks datahub's read-by-inode patch: run scripts/install.sh"


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "warm", {f"d/f{i:02d}.bin": os.urandom(1000 + 997 * i) for i in range(20)})


def test_warm_files_open_and_read_while_the_daemon_is_stopped(env: FuseEnv, files: Dataset) -> None:
    mnt = env.mountpoint("zmo")
    with env.mounted(mnt, "warm", "--no-passthrough") as proc:  # passthrough needs OPEN
        root = mnt / "warm" / f"v{files.seq}"
        paths = {root / key: data for key, data in files.objects.items()}
        for path, data in paths.items():  # cold: through the daemon and the cache
            assert path.read_bytes() == data
        results: dict = {}

        def read_all() -> None:
            results["data"] = {path: read_unbuffered(path) for path in paths}

        with pinned_in_page_cache(list(paths)):
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                reader = threading.Thread(target=read_all, daemon=True)
                reader.start()
                reader.join(timeout=30)
                finished = not reader.is_alive()
            finally:
                os.kill(proc.pid, signal.SIGCONT)
        reader.join(timeout=30)
        assert finished, "a warm open or read waited for the stopped daemon"
        assert results["data"] == paths
