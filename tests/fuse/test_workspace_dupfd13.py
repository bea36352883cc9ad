"""A duplicated descriptor after a close refused for space, on a real mount (dupfd13).

``dup(2)`` (or a child inheriting a descriptor) shares one open file description, so one
FUSE handle: each ``close(2)`` sends a FLUSH, the last one also the RELEASE. The first
close fails for space and reverts the file to its last acknowledged state; the handle
stays short, so every later close of it reports ENOSPC too (the revert may have dropped
bytes written through the other descriptor before it, and one handle cannot tell whose).
Bytes written through the other descriptor after the revert are then refused by that
close, so that close reverts the file again (no other handle has it open) and the RELEASE
commits nothing new: a close that returned ENOSPC never has its bytes appear later
(docs/writeback.md, "Out of space at close"). Before the fix the RELEASE committed them:
the file read back with them after the close and after kill -9, with and without
``--passthrough``. With another handle open, neither close nor release reverts again:
that handle's close keeps its bytes (second test).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from datahub.errors import NoSpace
from fuse_adapter.quota import Quota
from fuse_adapter.tree import ROOT_INODE
from fuse_adapter.workspace import WorkspaceView
from tests.fuse.conftest import FuseEnv
from tests.fuse.test_workspace_nospace import FLAGS, QUOTA, _close_fails_for_space, _write_all
from tests.fuse.test_workspace_review11 import _kill_9, _remounted, _wait_passthrough
from tests.writeback.conftest import make_env
from tests.writeback.test_revert_by_id import _content, _record_of

pytestmark = pytest.mark.fuse


@contextmanager
def quota_mount(env: FuseEnv, mnt: Path, name: str, flags: str) -> Iterator[subprocess.Popen]:
    """Workspace ``name`` at ``mnt`` with the small quota and the ``flags`` case's options,
    passthrough ready when asked; yields the daemon's process."""
    with env.mounted(mnt, "--workspace", name, "--quota", str(QUOTA), *FLAGS[flags]) as proc:
        if flags == "passthrough":
            _wait_passthrough(env, mnt)
        yield proc


@pytest.mark.parametrize("flags", FLAGS)
def test_writes_through_a_dup_after_a_refused_close_are_not_committed_by_the_release(
    env: FuseEnv, flags: str
) -> None:
    name = f"dupfd-{flags}"
    mnt = env.mountpoint(name)
    acked = os.urandom(300_000)
    late = os.urandom(8192)  # page-aligned, inside the acknowledged size: no quota growth
    with quota_mount(env, mnt, name, flags) as proc:
        # one handle only (the kernel sends a RELEASE after the close returns, so another
        # closed just before could still hold the file open): acknowledged by an fsync
        fd1 = os.open(mnt / "f.bin", os.O_CREAT | os.O_RDWR, 0o644)  # staged with --passthrough
        fd2 = os.dup(fd1)
        assert os.write(fd1, acked) == len(acked)
        os.fsync(fd1)
        _write_all(fd1, os.urandom(2 * QUOTA))  # ENOSPC at a write, or at the close
        _close_fails_for_space(fd1)  # the file is back to ``acked``
        assert os.pwrite(fd2, late, 0) == len(late)
        _close_fails_for_space(fd2)  # the handle is short: its bytes are refused
        assert (mnt / "f.bin").read_bytes() == acked  # before the fix: late + acked[8192:]
        assert sorted(os.listdir(mnt)) == ["f.bin"]
        _kill_9(proc)
    assert _remounted(env, mnt, name) == {"f.bin": acked}


@pytest.mark.parametrize("flags", FLAGS)
def test_a_second_handle_keeps_its_bytes_when_a_dup_of_a_refused_handle_is_released(
    env: FuseEnv, flags: str
) -> None:
    """The other side of the rule: a separate open of the same file shares its bytes with
    the refused handle, so that handle's RELEASE reverts nothing (the separate handle's
    bytes would go, and its close return 0); the separate handle's close, which returns 0,
    commits what the file holds then."""
    name = f"dupfd-other-{flags}"
    mnt = env.mountpoint(name)
    acked, fresh = os.urandom(300_000), os.urandom(8192)
    with quota_mount(env, mnt, name, flags) as proc:
        (mnt / "f.bin").write_bytes(acked)
        fd1 = os.open(mnt / "f.bin", os.O_RDWR | os.O_TRUNC)
        fd2 = os.dup(fd1)
        _write_all(fd1, os.urandom(2 * QUOTA))
        _close_fails_for_space(fd1)
        other = os.open(mnt / "f.bin", os.O_RDWR)
        assert os.pwrite(other, fresh, 0) == len(fresh)
        _close_fails_for_space(fd2)  # its RELEASE must not drop what ``other`` wrote
        os.close(other)  # 0: its bytes are committed
        want = fresh + acked[len(fresh) :]
        assert (mnt / "f.bin").read_bytes() == want
        _kill_9(proc)
    assert _remounted(env, mnt, name) == {"f.bin": want}


def test_the_release_of_a_refused_handle_beside_another_open_commits_nothing(tmp_path: Path) -> None:
    """The view itself, where the order is the test's (on a mount the kernel sends the
    RELEASE after the close returns): with another handle open, the refused handle's
    RELEASE neither reverts nor commits what it wrote after the revert; the other
    handle's close, which returns 0, commits the file as it then is."""
    view = WorkspaceView(make_env(tmp_path).open(), quota=Quota(64))
    fh, _, _, _ = view.create(ROOT_INODE, "f", exclusive=False)
    view.write(fh, 0, b"acked")
    view.flush(fh)  # a close of a dup: 0
    with pytest.raises(NoSpace):
        view.write(fh, 0, os.urandom(100))  # past the quota: the handle is short
    with pytest.raises(NoSpace):
        view.flush(fh)  # the file is back to "acked"
    other, _, _ = view.open(view.lookup(ROOT_INODE, "f").ino, truncate=False)
    file_id = view._handles[other][1].file_id
    acked = _record_of(view.ws, file_id)
    view.write(fh, 0, b"LATE!")  # through a dup of the refused descriptor
    with pytest.raises(NoSpace):
        view.flush(fh)  # refused; another handle has the file open: not reverted
    view.release(fh)
    assert _record_of(view.ws, file_id) == acked, "a release after a refused close committed"
    view.flush(other)
    view.release(other)
    assert _content(view.ws, "f") == b"LATE!"
    view.ws.close()
