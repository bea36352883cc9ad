"""release19: a handle that wrote nothing and whose close found the file committed (answered
without a hop, ``WorkspaceView.flush_is_done``) must not commit at its RELEASE either: it
comes later (here at munmap), when another handle's O_TRUNC rewrite is in the open file, and
that handle's failed write then reverts "to its last fsync or close", which must still be
the acknowledged file (review19d's flow, with the first close committing nothing new)."""

from __future__ import annotations

import os

import pytest

from tests.fuse.conftest import make_env
from tests.fuse.late_release import rewrite_past_the_quota_after_a_release
from tests.fuse.libc_mapping import map_shared_readonly
from tests.servers import S3Endpoint

pytestmark = pytest.mark.fuse

MiB = 1024**2


def test_the_release_of_a_handle_that_wrote_nothing_commits_nothing(
    tmp_path, moto_endpoint: S3Endpoint
) -> None:
    env = make_env(tmp_path, moto_endpoint)
    mnt = env.mountpoint("ws")
    with env.mounted(mnt, "--workspace", "r19unw", "--quota", str(4 * MiB)):
        acked = os.urandom(MiB)
        (mnt / "unw.bin").write_bytes(acked)  # acknowledged by its close
        first = os.open(mnt / "unw.bin", os.O_RDWR)  # writes nothing
        unmap = map_shared_readonly(first, MiB)  # holds the handle
        os.close(first)  # FLUSH: nothing to commit; the RELEASE waits for the munmap
        rewrite_past_the_quota_after_a_release(mnt / "unw.bin", unmap)  # the RELEASE at munmap
        assert (mnt / "unw.bin").read_bytes() == acked
