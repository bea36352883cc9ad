"""A close that fails for space (ENOSPC) never loses what an earlier fsync or close
acknowledged (docs/writeback.md, "Out of space at close"): the file goes back to its last
acknowledged state, the journal's record of it, and is removed only if it has none. The
writer still sees ENOSPC at close, and nothing half-written is ever committed.

Real mounts: a quota (the simplest way to run out of space), a full shared-tier device
(a real tmpfs) and, with ``--passthrough``, a full staging disk under staged files."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, wait_until
from tests.fuse.test_remount import _committed, _kill_9, _staging_on
from tests.fuse.test_workspace import _catalog
from tests.writeback import test_faults

pytestmark = pytest.mark.fuse
tiny_fs = test_faults.tiny_fs  # a real 2 MiB tmpfs

QUOTA = 1_000_000
FLAGS = {"default": [], "passthrough": ["--passthrough"], "writeback-cache": ["--writeback-cache"]}


def _write_all(fd: int, data: bytes, *, fails: bool = False) -> None:
    """Write ``data`` until done or a write fails with ENOSPC (``fails``: one must). With the
    kernel's writeback cache a write past the quota may fail only at the close."""
    written = 0
    try:
        while written < len(data):
            written += os.write(fd, data[written:])
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    else:
        assert not fails, "no write failed for space"


def _close_fails_for_space(fd: int) -> None:
    with pytest.raises(OSError) as exc:
        os.close(fd)
    assert exc.value.errno == errno.ENOSPC


@pytest.mark.parametrize("flags", FLAGS)
def test_a_close_past_the_quota_keeps_what_an_fsync_acknowledged(env: FuseEnv, flags: str) -> None:
    """fsync (0), writes past the quota (ENOSPC at a write or at the close), close (ENOSPC):
    the file holds exactly the fsynced bytes after the close, after kill -9 of the daemon and after a remount."""
    mnt = env.mountpoint(f"quota-{flags}")
    acked, old = os.urandom(300_000), os.urandom(200_000)
    with env.mounted(mnt, "--workspace", f"q-{flags}", "--quota", str(QUOTA), *FLAGS[flags]) as proc:
        (mnt / "old.bin").write_bytes(old)  # acknowledged by its close
        fd = os.open(mnt / "synced.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        assert os.write(fd, acked) == len(acked)
        os.fsync(fd)
        _write_all(fd, os.urandom(2 * QUOTA))
        _close_fails_for_space(fd)
        assert (mnt / "synced.bin").read_bytes() == acked  # main before the fix: FileNotFoundError
        # a file that existed before this open, rewritten past the quota: its old content stays
        fd = os.open(mnt / "old.bin", os.O_RDWR | os.O_TRUNC)
        _write_all(fd, os.urandom(2 * QUOTA))
        _close_fails_for_space(fd)
        # a file created and never acknowledged has no state to go back to: removed
        fd = os.open(mnt / "never.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        _write_all(fd, os.urandom(2 * QUOTA))
        _close_fails_for_space(fd)
        assert (mnt / "synced.bin").read_bytes() == acked
        assert (mnt / "old.bin").read_bytes() == old
        assert sorted(os.listdir(mnt)) == ["old.bin", "synced.bin"]
        _kill_9(proc, mnt)
        env.cli("mount", str(mnt), "--workspace", f"q-{flags}", "--background")  # over the stale mount
        try:
            assert sorted(os.listdir(mnt)) == ["old.bin", "synced.bin"]
            assert (mnt / "synced.bin").read_bytes() == acked
            assert (mnt / "old.bin").read_bytes() == old
        finally:
            env.cli("umount", str(mnt))


def test_a_close_on_a_full_shared_tier_keeps_what_an_fsync_acknowledged(env: FuseEnv, tiny_fs: Path) -> None:
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(f'shared_url = "{(tiny_fs / "shared").as_uri()}"\n')
    mnt = env.mountpoint("full-synced")
    acked = os.urandom(100_000)
    with env.mounted(mnt, "--workspace", "full-synced"):
        fd = os.open(mnt / "synced.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        assert os.write(fd, acked) == len(acked)
        os.fsync(fd)
        ballast = test_faults.fill(tiny_fs, 100_000)
        assert os.write(fd, os.urandom(1_000_000)) == 1_000_000  # buffered by the daemon
        _close_fails_for_space(fd)  # its chunk upload to the full device fails here
        ballast.unlink()  # the space comes back before the unmount: nothing commits the rest
        assert (mnt / "synced.bin").read_bytes() == acked
    assert _committed(env, mnt, "full-synced", "synced.bin") == acked


def test_a_staged_close_on_a_full_staging_disk_keeps_what_an_fsync_acknowledged(
    env: FuseEnv, tiny_fs: Path
) -> None:
    """--passthrough: the kernel writes the staged file past its reservation on a full disk;
    the close fails with ENOSPC and the file is back at its fsynced bytes."""
    mnt = _staging_on(env, tiny_fs, "staged-synced")
    acked = os.urandom(100_000)
    with env.mounted(mnt, "--workspace", "staged-synced", "--passthrough"):
        log = env.root / f"mount-{mnt.name}.log"
        wait_until(lambda: "writes: passthrough" in log.read_text(), 10)
        fd = os.open(mnt / "synced.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        assert os.write(fd, acked) == len(acked)
        os.fsync(fd)
        ballast = test_faults.fill(tiny_fs, 100_000)
        more = tiny_fs / "ballast-2"  # the disk fills up to its last block
        with open(more, "wb", buffering=0) as fh, pytest.raises(OSError) as full:
            while True:
                fh.write(b"\0" * 4096)
        assert full.value.errno == errno.ENOSPC
        _write_all(fd, os.urandom(3_000_000), fails=True)
        _close_fails_for_space(fd)
        assert (mnt / "synced.bin").read_bytes() == acked
        more.unlink()
        ballast.unlink()
    assert _committed(env, mnt, "staged-synced", "synced.bin") == acked


@pytest.mark.parametrize("end", ["umount", "kill-9"])
def test_a_new_file_whose_close_failed_on_a_full_journal_device_never_appears_later(
    env: FuseEnv, tiny_fs: Path, end: str
) -> None:
    """The journal's device is full at close(2) of a created file: its commit fails, and so
    would its removal (a journal write), so the file is dropped from the overlay without one.
    It never appears: not after the close, not once space is back and a namespace operation
    journals every created file, not in the version the unmount commits, not after a
    remount or after kill -9 of the daemon. Main before the fix kept it, pending, and the
    unmount's close of open files committed it."""
    name = f"jfull-{end}"
    journal = env.config.resolved_journal_dir / "workspaces" / name  # on the small device
    journal.parent.mkdir(parents=True, exist_ok=True)
    (tiny_fs / "ws").mkdir()
    journal.symlink_to(tiny_fs / "ws")
    with _catalog(env) as catalog:
        catalog.create_dataset(name)
    mnt = env.mountpoint(name)
    with env.mounted(mnt, "--workspace", name, "--commit-to", name) as proc:
        (mnt / "kept.txt").write_bytes(b"saved before the device filled")
        # created files held open: a namespace transaction journals them all, so the failed
        # file's removal needs more journal pages than its failed commit left behind
        held = {
            f"open{k:03}": os.open(mnt / f"open{k:03}", os.O_CREAT | os.O_WRONLY, 0o644) for k in range(300)
        }
        ballast = test_faults.fill(tiny_fs, 64_000)
        acked = ["kept.txt"]
        for i in range(500):
            fd = os.open(mnt / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644)
            second = os.open(mnt / f"f{i}", os.O_WRONLY)  # another handle of the same file
            assert os.write(fd, os.urandom(100_000)) == 100_000
            try:
                os.close(fd)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
            os.close(second)
            acked.append(f"f{i}")
        else:
            raise AssertionError("the journal's device never filled up")
        lost = mnt / f"f{i}"
        assert not lost.exists()  # main before the fix: it exists (its removal failed too)
        _write_all(second, b"written after the file was dropped")  # ENOSPC now or at close
        _close_fails_for_space(second)  # it commits nothing either
        ballast.unlink()  # the space comes back
        os.mkdir(mnt / "after")  # journals every created file: not the lost one
        assert not lost.exists()
        for fd in held.values():
            os.close(fd)
        expected = sorted([*acked, *held])
        assert sorted(os.listdir(mnt)) == sorted([*expected, "after"])
        if end == "kill-9":
            _kill_9(proc, mnt)
            env.cli("mount", str(mnt), "--workspace", name, "--background")  # over the stale mount
            try:
                assert sorted(os.listdir(mnt)) == sorted([*expected, "after"])
            finally:
                env.cli("umount", str(mnt))
    if end == "umount":
        with _catalog(env) as catalog:
            assert sorted(r.key for r in catalog.list_records(name, None)) == expected
    assert _committed(env, mnt, name, lost.name) is None
