"""wbreview42: a truncate by path (``truncate(2)``, a SETATTR with no handle) of a file another
handle is rewriting.

The view truncated such a file with ``Workspace.truncate``, which opens the file, cuts it and
closes with a commit: the open file as it was, the writer's ``O_TRUNC`` rewrite in it, not yet
acknowledged. When the writer's close was then refused for space (past the quota) it "went back
to its last fsync or close", which was the truncate's commit: bytes whose close returned ENOSPC
were the file, at once and after kill -9, and the acknowledged bytes were gone. The same on a
``--passthrough`` mount (the kernel writes the staged file) and through the daemon. Fixed in
``WorkspaceView._truncate``: a truncate by path is made through a writer of the file that is
open (``_writer_of``), as that handle's change, which its close commits or reverts.
"""

from __future__ import annotations

import contextlib
import errno
import os

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_workspace_review11 import _kill_9, _remounted, _wait_passthrough

pytestmark = pytest.mark.fuse

MiB = 1024**2
QUOTA = 100 * MiB  # room for staging (``STAGE_HEADROOM`` is 64 MiB)


@pytest.mark.parametrize("flags", [("--passthrough",), ()], ids=["passthrough", "daemon"])
def test_a_truncate_by_path_does_not_acknowledge_a_writers_refused_bytes(
    env: FuseEnv, flags: tuple[str, ...]
) -> None:
    if flags:
        from fuse_adapter import fuse_ops

        if not fuse_ops.PASSTHROUGH:
            pytest.skip("pyfuse3 built without libfuse >= 3.16")
    name = "w42t"
    mnt = env.mountpoint(name)
    acked, rewrite = os.urandom(4096), os.urandom(4096)
    with env.mounted(mnt, "--workspace", name, "--quota", str(QUOTA), *flags) as proc:
        if flags:
            _wait_passthrough(env, mnt)
        (mnt / "f.bin").write_bytes(acked)  # acknowledged
        w = os.open(mnt / "f.bin", os.O_WRONLY | os.O_TRUNC)
        try:
            assert os.pwrite(w, rewrite, 0) == len(rewrite)  # not acknowledged
            os.truncate(mnt / "f.bin", 2048)  # by path: no handle
            assert (mnt / "f.bin").read_bytes() == rewrite[:2048]
            with contextlib.suppress(OSError):  # past the quota: refused here (daemon) or at close
                os.pwrite(w, b"x", 2 * QUOTA)
        finally:
            with pytest.raises(OSError) as refused:
                os.close(w)  # goes back to its last fsync or close
        assert refused.value.errno == errno.ENOSPC
        held = (mnt / "f.bin").read_bytes()
        if held == rewrite[:2048]:
            pytest.fail("the rewrite whose close returned ENOSPC is the file: the truncate committed it")
        assert held == acked
        _kill_9(proc)
        assert _remounted(env, mnt, name)["f.bin"] == acked
