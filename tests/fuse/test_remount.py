"""Remounting after the daemon died (kill -9): `datahub mount` cleans the stale mount point
itself and mounts, a workspace recovers from its journal, and a live mount (or a workspace
open in another live daemon) is never taken over: exit 4 (Conflict)."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import pytest

from fuse_adapter.daemon import DEAD_DAEMON_ERRNOS, is_mounted, read_record
from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset, wait_until
from tests.writeback import test_faults

pytestmark = pytest.mark.fuse
tiny_fs = test_faults.tiny_fs  # a real 2 MiB tmpfs (the shared tier runs out of space on it)


@pytest.fixture
def small(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "small", {"a/b.txt": b"hello", "c.txt": b"world"})


def _kill_9(proc, mnt: Path) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    with pytest.raises(OSError) as exc:
        os.listdir(mnt)  # the kernel mount outlived its daemon
    # over io_uring the connection ends once the kernel has torn the dead daemon's rings
    # down (asynchronously): a request queued before that ends with ECONNABORTED or ECANCELED
    assert exc.value.errno in DEAD_DAEMON_ERRNOS

    def settled() -> bool:
        try:
            os.listdir(mnt)
        except OSError as err:
            return err.errno == errno.ENOTCONN
        return False

    wait_until(settled, 30)
    assert is_mounted(str(mnt))


def test_remount_over_a_stale_workspace_mount_recovers_acknowledged_files(env: FuseEnv) -> None:
    mnt = env.mountpoint("ws")
    files = {"out/a.txt": b"alpha\n", "b.bin": os.urandom(300_001), "empty": b""}
    with env.mounted(mnt, "--workspace", "run1") as proc:
        for key, data in files.items():
            (mnt / key).parent.mkdir(parents=True, exist_ok=True)
            (mnt / key).write_bytes(data)  # each close(2) returned: acknowledged
        _kill_9(proc, mnt)
        again = env.cli("mount", str(mnt), "--workspace", "run1", "--background", check=False)
        try:
            assert again.returncode == 0, again.stderr
            assert "stale" in again.stderr  # it says what it cleaned
            for key, data in files.items():
                assert (mnt / key).read_bytes() == data
            record = read_record(env.config.home_path, str(mnt))
            assert record is not None and record.kind == "workspace" and record.pid != proc.pid
        finally:
            out = env.cli("umount", str(mnt))
        assert "stopped" in out.stdout and not is_mounted(str(mnt))


def test_remount_over_a_stale_readonly_mount(env: FuseEnv, small: Dataset) -> None:
    mnt = env.mountpoint("ro")
    with env.mounted(mnt, "small") as proc:
        _kill_9(proc, mnt)
        again = env.cli("mount", str(mnt), "small", "--background", check=False)
        try:
            assert again.returncode == 0, again.stderr
            assert "stale" in again.stderr
            assert (mnt / "small" / "v1" / "a" / "b.txt").read_bytes() == b"hello"
        finally:
            env.cli("umount", str(mnt))
    assert not is_mounted(str(mnt))


def test_a_live_mount_is_never_taken_over(env: FuseEnv, small: Dataset) -> None:
    mnt = env.mountpoint("live")
    with env.mounted(mnt, "small") as proc:
        for extra in ([], ["--background"]):
            busy = env.cli("mount", str(mnt), "small", *extra, check=False)
            assert busy.returncode == 4 and "already a mount point" in busy.stderr
        assert proc.poll() is None
        assert (mnt / "small" / "v1" / "c.txt").read_bytes() == b"world"  # still served by its daemon


@pytest.mark.parametrize("mode", ["--foreground", "--background"])
def test_a_second_daemon_on_an_open_workspace_exits_4(env: FuseEnv, mode: str) -> None:
    first, second = env.mountpoint("first"), env.mountpoint("second")
    with env.mounted(first, "--workspace", "shared") as proc:
        (first / "x.txt").write_bytes(b"x")
        other = env.cli("mount", str(second), "--workspace", "shared", mode, check=False)
        assert other.returncode == 4, other.stderr
        assert "already open for writing" in other.stderr
        assert not is_mounted(str(second))
        assert proc.poll() is None and (first / "x.txt").read_bytes() == b"x"


@pytest.mark.parametrize("flags", [[], ["--writeback-cache"]], ids=["daemon", "writeback-cache"])
def test_umount_of_a_busy_workspace_detaches_it_and_holders_get_enotconn(
    env: FuseEnv, flags: list[str]
) -> None:
    """What docs/fuse.md says `datahub umount` does to a mount still in use: it does not wait
    for holders; the daemon closes their handles (durably) and flushes, the mount is detached
    lazily, and a process still holding a file or directory there gets ENOTCONN from then on.
    With the kernel's write-back cache, the holder's bytes still in the page cache too."""
    mnt = env.mountpoint("busy-ws")
    with env.mounted(mnt, "--workspace", "busy", *flags):
        held = os.open(mnt / "held.txt", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(held, b"written before umount")
        held_dir = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
        out = env.cli("umount", str(mnt))
        assert "stopped" in out.stdout and not is_mounted(str(mnt))
        assert os.listdir(mnt) == []  # the path shows the directory under the mount again
        with pytest.raises(OSError) as listing:
            os.listdir(held_dir)
        with pytest.raises(OSError) as writing:
            os.write(held, b" and after")
        closes = []
        for fd in (held, held_dir):
            try:
                os.close(fd)  # the descriptor is released even when close reports an error
            except OSError as exc:
                closes.append(exc.errno)
        assert listing.value.errno == writing.value.errno == errno.ENOTCONN
        assert set(closes) <= {errno.ENOTCONN}
    # what was written before the umount was closed and flushed by the daemon: nothing lost
    env.cli("mount", str(mnt), "--workspace", "busy", "--background")
    try:
        assert (mnt / "held.txt").read_bytes() == b"written before umount"
    finally:
        env.cli("umount", str(mnt))


def test_a_file_whose_close_returned_enospc_never_appears_later(env: FuseEnv, tiny_fs: Path) -> None:
    """The shared tier's device is full at close(2): the close fails with ENOSPC and that is
    final. The file is discarded, so neither the space coming back nor the unmount's final
    flush of open files saves it afterwards (a job that saw the error never finds it committed)."""
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(f'shared_url = "{(tiny_fs / "shared").as_uri()}"\n')
    mnt = env.mountpoint("full")
    with env.mounted(mnt, "--workspace", "full"):
        (mnt / "kept.txt").write_bytes(b"saved before the device filled")
        ballast = test_faults.fill(tiny_fs, 100_000)
        fd = os.open(mnt / "lost.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        assert os.write(fd, os.urandom(1_000_000)) == 1_000_000  # buffered by the daemon
        with pytest.raises(OSError) as exc:
            os.close(fd)  # the chunk upload to the full device fails here
        assert exc.value.errno == errno.ENOSPC
        ballast.unlink()  # the space comes back before the unmount
        assert not (mnt / "lost.bin").exists()
        assert sorted(os.listdir(mnt)) == ["kept.txt"]
    env.cli("mount", str(mnt), "--workspace", "full", "--background")
    try:
        assert sorted(os.listdir(mnt)) == ["kept.txt"]
        assert (mnt / "kept.txt").read_bytes() == b"saved before the device filled"
    finally:
        env.cli("umount", str(mnt))


def _staging_on(env: FuseEnv, tiny_fs: Path, name: str) -> Path:
    """The mount point of workspace ``name`` whose staged files live on ``tiny_fs``."""
    from fuse_adapter import fuse_ops

    if not fuse_ops.PASSTHROUGH:
        pytest.skip("this kernel or build has no FUSE passthrough")
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(f'shared_url = "s3://{env.bucket}/shared"\n')  # as the soak's RADOS: not local
    # with a shared tier that is not a local directory, staged files live beside the
    # workspace's journal; only that directory is on the small device, as only a node's disk
    # filled in the soak (the journal and the shared tier had room)
    staging = env.config.resolved_journal_dir / "workspaces" / name / "staging"
    staging.parent.mkdir(parents=True)
    staging.symlink_to(tiny_fs)
    return env.mountpoint(name)


def _committed(env: FuseEnv, mnt: Path, name: str, file: str) -> bytes | None:
    """What a fresh mount of workspace ``name`` holds at ``file`` (None: no such file)."""
    env.cli("mount", str(mnt), "--workspace", name, "--background")
    try:
        return (mnt / file).read_bytes() if (mnt / file).exists() else None
    finally:
        env.cli("umount", str(mnt))


def test_a_staged_file_whose_write_failed_with_enospc_is_never_committed_torn(
    env: FuseEnv, tiny_fs: Path
) -> None:
    """The write-back promise (docs/writeback.md): a committed file holds bytes a writer wrote
    whole, never a torn prefix of a write that failed. Through the daemon the failing WRITE
    discards the file; with staged files (``--passthrough``) the failure happens in the
    kernel. The chaos soak found this case (a node's disk filled mid-write); it is why staged
    files stay opt-in and the soak's workspaces write through the daemon."""
    mnt = _staging_on(env, tiny_fs, "torn")
    data = os.urandom(1_500_000)
    with env.mounted(mnt, "--workspace", "torn", "--passthrough"):
        log = env.root / f"mount-{mnt.name}.log"
        wait_until(lambda: "writes: passthrough" in log.read_text(), 10)
        ballast = test_faults.fill(tiny_fs, 400_000)
        fd = os.open(mnt / "torn.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        written = 0
        with pytest.raises(OSError) as exc:
            while written < len(data):
                written += os.write(fd, data[written:])
        assert exc.value.errno == errno.ENOSPC and 0 < written < len(data)
        try:
            os.close(fd)
        except OSError as err:
            assert err.errno == errno.ENOSPC
        ballast.unlink()
    committed = _committed(env, mnt, "torn", "torn.bin")
    assert committed in (None, data), f"a torn file of {len(committed or b'')} bytes was committed"


def test_a_staged_file_truncated_then_rewritten_on_a_full_disk_is_never_committed_torn(
    env: FuseEnv, tiny_fs: Path
) -> None:
    """A truncate frees a staged file's blocks, the ones reserved for it past its end too
    (docs/writeback.md, "A full staging disk"): the workspace must reserve them again, or a
    rewrite after ``ftruncate(fd, 0)`` on a disk that filled meanwhile fails with ENOSPC in
    the kernel while the file is still inside what the daemon believes reserved, and the
    close commits what came before the failure."""
    mnt = _staging_on(env, tiny_fs, "retrunc")
    data = os.urandom(1_500_000)
    with env.mounted(mnt, "--workspace", "retrunc", "--passthrough"):
        log = env.root / f"mount-{mnt.name}.log"
        wait_until(lambda: "writes: passthrough" in log.read_text(), 10)
        ballast = test_faults.fill(tiny_fs, 400_000)
        fd = os.open(mnt / "retrunc.bin", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
        assert os.write(fd, b"first draft " * 8_000) == 96_000
        os.ftruncate(fd, 0)  # a SETATTR: the daemon truncates the staged file
        more = tiny_fs / "ballast-2"  # the disk fills up to its last block meanwhile
        with open(more, "wb", buffering=0) as fh, pytest.raises(OSError) as full:
            while True:
                fh.write(b"\0" * 4096)
        assert full.value.errno == errno.ENOSPC
        written = 0
        with pytest.raises(OSError) as exc:
            while written < len(data):
                written += os.write(fd, data[written:])
        assert exc.value.errno == errno.ENOSPC and written < len(data)
        try:
            os.close(fd)
        except OSError as err:
            assert err.errno == errno.ENOSPC
        more.unlink()
        ballast.unlink()
    committed = _committed(env, mnt, "retrunc", "retrunc.bin")
    assert committed in (None, data), f"a torn file of {len(committed or b'')} bytes was committed"
