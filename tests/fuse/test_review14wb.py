"""review14wb: adversarial checks of the write-back promises through real mounts.

First: with ``--passthrough`` the kernel writes a staged file itself, so the daemon never
sees which handle wrote. A close refused for space reverts the file to its last
acknowledged state, dropping every handle's unsaved bytes; another handle that wrote
through the kernel must then not get 0 from its close with its bytes gone (review13c
covered only handles whose writes reach the daemon)."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, wait_until
from tests.fuse.test_workspace_nospace import FLAGS, QUOTA, _close_fails_for_space, _write_all
from tests.fuse.test_workspace_review11 import _kill_9, _remounted, _wait_passthrough
from tests.writeback import test_faults
from tests.writeback.test_mount_passthrough import _staged_files_of

pytestmark = pytest.mark.fuse
tiny_fs = test_faults.tiny_fs  # a real 2 MiB tmpfs

#: room for staging (``STAGE_HEADROOM`` is 64 MiB); a sparse write past it runs out of quota
BIG_QUOTA = 100 * 1024**2


@contextlib.contextmanager
def staged_and_acknowledged(env: FuseEnv, name: str, acked: bytes) -> Iterator[tuple[Path, object, int]]:
    """A ``--passthrough`` workspace mount under ``BIG_QUOTA`` holding ``f.bin`` staged,
    written with ``acked`` and fsynced through handle ``b``, which is left open: (mount
    point, the mount's process, b). The mount point is known before the block, so a test
    can remount it after."""
    mnt = env.mountpoint(name)
    with env.mounted(mnt, "--workspace", name, "--quota", str(BIG_QUOTA), "--passthrough") as proc:
        _wait_passthrough(env, mnt)
        b = os.open(mnt / "f.bin", os.O_CREAT | os.O_RDWR, 0o644)
        assert _staged_files_of(proc.pid), "the file is not staged: the test checks nothing"
        assert os.write(b, acked) == len(acked)
        os.fsync(b)
        yield mnt, proc, b


def _after_close(fd: int, acked: bytes, fresh: bytes) -> bytes:
    """What the file must hold once ``fd``, which wrote ``fresh`` over the start of ``acked``,
    is closed: ``acked`` if the close was refused, else its bytes too."""
    try:
        os.close(fd)
    except OSError:
        return acked
    return fresh + acked[len(fresh) :]


def test_a_staged_writers_bytes_dropped_by_a_revert_are_not_acknowledged(env: FuseEnv) -> None:
    """b creates a staged file, acknowledges it, then rewrites its first page through the
    kernel; a opens the file (sharing the staged file), writes one byte far past the quota
    and its close is refused for space: the revert drops b's page too, so b's close must
    report it (before the fix: 0, and the file read back without b's bytes)."""
    name = "r14wb-staged"
    acked, fresh = os.urandom(100_000), os.urandom(8192)
    with staged_and_acknowledged(env, name, acked) as (mnt, proc, b):
        assert os.pwrite(b, fresh, 0) == len(fresh)  # the kernel writes it; the daemon sees nothing
        a = os.open(mnt / "f.bin", os.O_RDWR)
        assert os.pwrite(a, b"x", 2 * BIG_QUOTA) == 1  # sparse: charged at a's close
        _close_fails_for_space(a)
        want = _after_close(b, acked, fresh)
        assert (mnt / "f.bin").read_bytes() == want, "a close that returned 0 lost its bytes"
        _kill_9(proc)
    assert _remounted(env, mnt, name) == {"f.bin": want}


def test_a_reader_open_across_a_revert_of_a_staged_file_closes_cleanly(env: FuseEnv) -> None:
    """The conservative rule above refuses every other handle that may have written; an
    ``O_RDONLY`` handle cannot have, so its close returns 0 and leaves the file alone (before,
    its close reported ENOSPC and reverted the file again)."""
    name = "r14wb-reader"
    acked = os.urandom(100_000)
    with staged_and_acknowledged(env, name, acked) as (
        mnt,
        proc,
        b,
    ):  # b stays open, so a shares its staged file
        reader = os.open(mnt / "f.bin", os.O_RDONLY)
        a = os.open(mnt / "f.bin", os.O_RDWR)
        assert os.pwrite(a, b"x", 2 * BIG_QUOTA) == 1
        _close_fails_for_space(a)
        assert os.pread(reader, len(acked), 0) == acked
        os.close(reader)  # raised ENOSPC before
        with contextlib.suppress(OSError):
            os.close(b)  # a staged writer: refused (the kernel never says whether it wrote)
        assert (mnt / "f.bin").read_bytes() == acked
        _kill_9(proc)
    assert _remounted(env, mnt, name) == {"f.bin": acked}


@pytest.mark.parametrize("flags", FLAGS)
def test_open_dirty_files_renamed_over_unlinked_truncated_and_appended(env: FuseEnv, flags: str) -> None:
    """Namespace operations on open, dirty files (docs/writeback.md, "Semantics"), every
    close 0, and the same files after kill -9 and a fresh mount:
    - ``b`` renamed over ``a`` while ``a`` is open and dirty: ``a``'s close drops nothing
      of ``b`` and resurrects nothing of itself;
    - ``c`` unlinked while open and dirty: gone, also after the crash;
    - ``d`` cut by a second handle's ftruncate while the first goes on writing: a hole of
      zeros; ``g`` the same, cut by path (a SETATTR without a handle);
    - ``e`` appended to by two ``O_APPEND`` handles in turn: every write whole, in order;
    - a hard link is refused (no hard links) and changes nothing."""
    name = f"r14wb-ns-{flags}"
    mnt = env.mountpoint(name)
    a_bytes, b_bytes, c_bytes = os.urandom(120_000), os.urandom(70_000), os.urandom(50_000)
    d_head, d_tail = os.urandom(200_000), os.urandom(10_000)
    parts = [os.urandom(4096 + i) for i in range(6)]
    with env.mounted(mnt, "--workspace", name, *FLAGS[flags]) as proc:
        if flags == "passthrough":
            _wait_passthrough(env, mnt)
        fa = os.open(mnt / "a", os.O_CREAT | os.O_RDWR, 0o644)
        assert os.write(fa, a_bytes) == len(a_bytes)
        fb = os.open(mnt / "b", os.O_CREAT | os.O_RDWR, 0o644)
        assert os.write(fb, b_bytes) == len(b_bytes)
        os.rename(mnt / "b", mnt / "a")
        assert os.pwrite(fa, b"late", 0) == 4  # into the replaced file, which has no name
        os.close(fa)
        os.close(fb)

        fc = os.open(mnt / "c", os.O_CREAT | os.O_RDWR, 0o644)
        assert os.write(fc, c_bytes) == len(c_bytes)
        os.unlink(mnt / "c")
        assert os.pwrite(fc, b"more", 10) == 4
        assert os.pread(fc, 8, 8) == c_bytes[8:10] + b"more" + c_bytes[14:16]
        os.close(fc)

        fd1 = os.open(mnt / "d", os.O_CREAT | os.O_RDWR, 0o644)
        assert os.write(fd1, d_head) == len(d_head)
        fd2 = os.open(mnt / "d", os.O_RDWR)
        os.ftruncate(fd2, 50_000)
        assert os.pwrite(fd1, d_tail, 200_000) == len(d_tail)
        os.close(fd2)
        os.close(fd1)
        d_want = d_head[:50_000] + bytes(150_000) + d_tail

        fg = os.open(mnt / "g", os.O_CREAT | os.O_RDWR, 0o644)  # the same, cut by path
        assert os.write(fg, d_head) == len(d_head)
        os.truncate(mnt / "g", 50_000)
        assert os.pwrite(fg, d_tail, 200_000) == len(d_tail)
        assert os.fstat(fg).st_size == 210_000
        os.close(fg)

        e1 = os.open(mnt / "e", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
        e2 = os.open(mnt / "e", os.O_WRONLY | os.O_APPEND)
        for i, part in enumerate(parts):
            assert os.write(e1 if i % 2 == 0 else e2, part) == len(part)
        os.close(e1)
        os.close(e2)

        with pytest.raises(OSError):
            os.link(mnt / "a", mnt / "hard")
        want = {"a": b_bytes, "d": d_want, "e": b"".join(parts), "g": d_want}
        assert {p.name: p.read_bytes() for p in sorted(mnt.iterdir())} == want
        _kill_9(proc)
        assert _remounted(env, mnt, name) == want


@pytest.mark.parametrize("flags", FLAGS)
def test_an_fsync_then_writes_past_the_quota_then_kill_9_keeps_the_fsynced_bytes(
    env: FuseEnv, flags: str
) -> None:
    """fsync returns 0, later writes run past the quota (ENOSPC at a write, or not yet: the
    kernel may hold them), then kill -9 with the file still open: the journal holds exactly
    the fsynced bytes. With ``--passthrough`` and room to stage, the kernel writes the staged
    file past the quota (a sparse write the daemon never sees) before the crash."""
    name = f"r14wb-fsync-{flags}"
    mnt = env.mountpoint(name)
    acked = os.urandom(300_000)
    quota = BIG_QUOTA if flags == "passthrough" else QUOTA
    with env.mounted(mnt, "--workspace", name, "--quota", str(quota), *FLAGS[flags]) as proc:
        if flags == "passthrough":
            _wait_passthrough(env, mnt)
        fd = os.open(mnt / "f.bin", os.O_CREAT | os.O_RDWR, 0o644)
        if flags == "passthrough":
            assert _staged_files_of(proc.pid), "the file is not staged: the test checks less"
        assert os.write(fd, acked) == len(acked)
        os.fsync(fd)
        assert os.pwrite(fd, b"over", 0) == 4
        if flags == "passthrough":
            assert os.pwrite(fd, b"x", 2 * quota) == 1
        else:
            _write_all(fd, os.urandom(2 * QUOTA))
        _kill_9(proc)
        with contextlib.suppress(OSError):  # the daemon is gone: nothing of this close is acknowledged
            os.close(fd)
        assert _remounted(env, mnt, name) == {"f.bin": acked}


def _available(mnt) -> int:
    st = os.statvfs(mnt)
    return st.f_bavail * st.f_frsize


@pytest.mark.parametrize("flags", FLAGS)
def test_a_file_unlinked_or_replaced_while_written_leaves_no_charge_in_the_quota(
    env: FuseEnv, flags: str
) -> None:
    """Files written on after their unlink, or after a rename replaced them, and then
    closed: their bytes are gone, so the quota (``df``) is whole again afterwards. (Until
    that close, what the daemon wrote to them since counts.)"""
    name = f"r14wb-quota-{flags}"
    mnt = env.mountpoint(name)
    chunk = os.urandom(1024**2)
    with env.mounted(mnt, "--workspace", name, "--quota", str(BIG_QUOTA), *FLAGS[flags]):
        if flags == "passthrough":
            _wait_passthrough(env, mnt)
        whole = _available(mnt)
        fd = os.open(mnt / "gone.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        for _ in range(4):
            os.write(fd, chunk)
        os.unlink(mnt / "gone.bin")
        for _ in range(4):
            os.write(fd, chunk)
        if flags == "default":  # written through the daemon: all of it charged until the last close
            assert whole - _available(mnt) == 8 * len(chunk)
        os.close(fd)
        fd = os.open(mnt / "old.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        for _ in range(4):
            os.write(fd, chunk)
        (mnt / "new.bin").write_bytes(b"new")
        os.rename(mnt / "new.bin", mnt / "old.bin")
        for _ in range(4):
            os.write(fd, chunk)
        os.close(fd)
        assert (mnt / "old.bin").read_bytes() == b"new"

        def charged() -> int:
            return whole - _available(mnt)

        with contextlib.suppress(AssertionError):  # refunded at the RELEASE, sent after close(2)
            wait_until(lambda: charged() == 4096, 30)
        assert charged() == 4096, "bytes of files without a name are still charged"


def test_an_fsync_refused_on_a_full_shared_tier_then_kill_9_keeps_the_last_acknowledged_bytes(
    env: FuseEnv, tiny_fs
) -> None:
    """fsync (0); the shared tier's device fills; more writes and an fsync refused with
    ENOSPC (which discards nothing: the handle keeps its bytes for a retry); the space comes
    back, a second file is written and closed (0) beside it; kill -9 with the first file
    still open. A fresh mount holds the first file's fsynced bytes exactly (nothing of the
    refused fsync, neither whole nor in part) and the second file whole."""
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(f'shared_url = "{(tiny_fs / "shared").as_uri()}"\n')
    name = "r14wb-fullfsync"
    mnt = env.mountpoint(name)
    acked, other = os.urandom(100_000), os.urandom(60_000)
    with env.mounted(mnt, "--workspace", name) as proc:
        fd = os.open(mnt / "f.bin", os.O_CREAT | os.O_RDWR, 0o644)
        assert os.write(fd, acked) == len(acked)
        os.fsync(fd)
        ballast = test_faults.fill(tiny_fs, 100_000)
        assert os.pwrite(fd, os.urandom(1_000_000), 50_000) == 1_000_000
        with pytest.raises(OSError) as refused:
            os.fsync(fd)
        assert refused.value.errno == errno.ENOSPC
        ballast.unlink()
        (mnt / "g.bin").write_bytes(other)
        _kill_9(proc)
        with contextlib.suppress(OSError):
            os.close(fd)
        assert _remounted(env, mnt, name) == {"f.bin": acked, "g.bin": other}
