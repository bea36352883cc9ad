"""review13c: a short handle's file renamed and then unlinked on a real mount, with and
without ``--passthrough``: its close is refused, nothing of it is committed, the file
another writer put at its old name keeps every byte, after the close and after kill -9."""

from __future__ import annotations

import os

import pytest

from tests.fuse.conftest import FuseEnv
from tests.fuse.test_review14wb import _after_close
from tests.fuse.test_workspace_dupfd13 import quota_mount
from tests.fuse.test_workspace_nospace import FLAGS, QUOTA, _close_fails_for_space, _write_all
from tests.fuse.test_workspace_review11 import _kill_9, _remounted

pytestmark = pytest.mark.fuse


@pytest.mark.parametrize("flags", FLAGS)
def test_a_short_handle_renamed_and_unlinked_commits_nothing(env: FuseEnv, flags: str) -> None:
    name = f"r13c-{flags}"
    mnt = env.mountpoint(name)
    acked, other = os.urandom(100_000), os.urandom(50_000)
    with quota_mount(env, mnt, name, flags) as proc:
        fd = os.open(mnt / "f.bin", os.O_CREAT | os.O_RDWR, 0o644)
        fd2 = os.dup(fd)
        assert os.write(fd, acked) == len(acked)
        os.fsync(fd)
        _write_all(fd, os.urandom(2 * QUOTA))  # ENOSPC at a write, or at the close
        os.rename(mnt / "f.bin", mnt / "g.bin")
        os.unlink(mnt / "g.bin")
        (mnt / "f.bin").write_bytes(other)  # another file at the old name, acknowledged
        _close_fails_for_space(fd)
        assert os.pwrite(fd2, b"late", 0) == 4
        _close_fails_for_space(fd2)
        assert sorted(os.listdir(mnt)) == ["f.bin"]
        assert (mnt / "f.bin").read_bytes() == other
        _kill_9(proc)
    assert _remounted(env, mnt, name) == {"f.bin": other}


@pytest.mark.parametrize("flags", FLAGS)
def test_another_handles_bytes_dropped_by_a_refused_close_are_not_acknowledged(
    env: FuseEnv, flags: str
) -> None:
    """Handle b wrote before handle a's close was refused for space: a's revert drops b's
    bytes too (one open file), so b's close must not return 0 with them gone."""
    name = f"r13c-other-{flags}"
    mnt = env.mountpoint(name)
    acked, fresh = os.urandom(100_000), os.urandom(8192)
    with quota_mount(env, mnt, name, flags) as proc:
        (mnt / "f.bin").write_bytes(acked)
        b = os.open(mnt / "f.bin", os.O_RDWR)
        assert os.pwrite(b, fresh, 0) == len(fresh)
        a = os.open(mnt / "f.bin", os.O_RDWR)
        _write_all(a, os.urandom(2 * QUOTA))
        _close_fails_for_space(a)
        want = _after_close(b, acked, fresh)  # refused: acked; 0: b's bytes must be there
        assert (mnt / "f.bin").read_bytes() == want, "a close that returned 0 lost its bytes"
        _kill_9(proc)
    assert _remounted(env, mnt, name) == {"f.bin": want}


@pytest.mark.parametrize("flags", FLAGS)
def test_a_staged_writers_bytes_dropped_by_a_refused_close_are_not_acknowledged(
    env: FuseEnv, flags: str
) -> None:
    """As above, but b created the file and acknowledged a first part with an fsync. (With
    this small quota no file is staged, ``STAGE_HEADROOM``: b's writes reach the daemon also
    with ``--passthrough``; a staged writer's are not seen, docs/writeback.md.)"""
    name = f"r13c-staged-{flags}"
    mnt = env.mountpoint(name)
    acked, fresh = os.urandom(100_000), os.urandom(8192)
    with quota_mount(env, mnt, name, flags) as proc:
        b = os.open(mnt / "f.bin", os.O_CREAT | os.O_RDWR, 0o644)
        assert os.write(b, acked) == len(acked)
        os.fsync(b)
        assert os.pwrite(b, fresh, 0) == len(fresh)
        a = os.open(mnt / "f.bin", os.O_RDWR)
        _write_all(a, os.urandom(2 * QUOTA))
        _close_fails_for_space(a)
        want = _after_close(b, acked, fresh)  # refused: acked; 0: b's bytes must be there
        assert (mnt / "f.bin").read_bytes() == want, "a close that returned 0 lost its bytes"
        _kill_9(proc)
    assert _remounted(env, mnt, name) == {"f.bin": want}
