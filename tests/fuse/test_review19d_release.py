"""review19d: the RELEASE of a handle whose close already committed the file must not
acknowledge another handle's later changes. Found on a ``--writes-in-c`` mount
(``test_review19d_cwrites.py``); the same on the default daemon path, shown here with a
quota: the kernel sends RELEASE after close(2) returned (asynchronously; for a mapped file
only at munmap, which makes it deterministic here), and ``WorkspaceView.release`` commits
the shared open file then, with an O_TRUNC handle's unacknowledged rewrite in it. That
handle's write past the quota fails, its close returns ENOSPC and reverts the file "to its
last fsync or close", which is now the RELEASE's commit: the acknowledged 1 MiB are gone
and a 3 MiB file ending in zeros nobody acknowledged is committed. Without the mapping (the
RELEASE before the second open) the same flow keeps the 1 MiB.
"""

from __future__ import annotations

import os

import pytest

from tests.fuse.conftest import make_env
from tests.fuse.late_release import rewrite_past_the_quota_after_a_release
from tests.fuse.libc_mapping import map_shared_readonly
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

MiB = 1024**2


def test_a_release_after_the_close_does_not_acknowledge_another_handles_rewrite(
    tmp_path, moto_endpoint: S3Endpoint
) -> None:
    env = make_env(tmp_path, moto_endpoint)
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "r19drel", "--quota", str(4 * MiB)):
        acked = os.urandom(MiB)
        first = os.open(mnt / "rel.bin", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        assert os.write(first, acked) == MiB
        unmap = map_shared_readonly(first, MiB)  # holds the handle
        os.close(first)  # FLUSH: ``acked`` is committed; the RELEASE waits for the munmap
        rewrite_past_the_quota_after_a_release(mnt / "rel.bin", unmap)  # the RELEASE at munmap
        assert (mnt / "rel.bin").read_bytes() == acked
