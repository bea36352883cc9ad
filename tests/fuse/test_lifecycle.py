"""Mount lifecycle: background start, signals, umount of live and stale (crashed) mounts."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fuse_adapter.daemon import (
    DEAD_DAEMON_ERRNOS,
    is_mount_daemon,
    is_mounted,
    read_record,
    record_path,
    write_record,
)
from tests.fuse.conftest import Dataset, FuseEnv, upload_dataset, wait_until

pytestmark = pytest.mark.fuse


@pytest.fixture
def small(env: FuseEnv) -> Dataset:
    return upload_dataset(env, "small", {"a/b.txt": b"hello", "c.txt": b"world"})


def test_background_returns_when_ready_and_umount_stops_it(env: FuseEnv, small: Dataset) -> None:
    mnt = env.mountpoint("bg")
    try:
        env.cli("mount", str(mnt), "small@v1", "--background")
        assert (mnt / "small" / "v1" / "a" / "b.txt").read_bytes() == b"hello"  # no waiting needed
        record = read_record(env.config.home_path, str(mnt))
        assert record is not None and record.kind == "readonly"
        out = env.cli("umount", str(mnt)).stdout
        assert "stopped" in out and not is_mounted(str(mnt))
        wait_until(lambda: not _alive(record.pid), 30)
    finally:
        env.teardown(mnt, None)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_unmounts_cleanly(env: FuseEnv, small: Dataset, sig: int) -> None:
    mnt = env.mountpoint("sig")
    with env.mounted(mnt, "small") as proc:
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        assert not is_mounted(str(mnt))
        assert read_record(env.config.home_path, str(mnt)) is None


def test_umount_cleans_a_stale_mount_after_kill_9(env: FuseEnv, small: Dataset) -> None:
    mnt = env.mountpoint("stale")
    with env.mounted(mnt, "small") as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        with pytest.raises(OSError) as exc:
            os.listdir(mnt)  # the kernel mount outlived its daemon
        assert exc.value.errno in DEAD_DAEMON_ERRNOS  # ENOTCONN once the connection has ended
        assert is_mounted(str(mnt))
        out = env.cli("umount", str(mnt)).stdout
        assert "stale" in out and not is_mounted(str(mnt))
        assert os.listdir(mnt) == []


def test_umount_never_signals_a_process_that_reused_a_dead_daemons_pid(env: FuseEnv, small: Dataset) -> None:
    """The record of a daemon killed by -9 names a pid the kernel has given to an unrelated
    process: umount must clean the stale mount, not SIGTERM that process and wait for it."""
    mnt = env.mountpoint("reused")
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        with env.mounted(mnt, "small") as proc:
            wait_until(lambda: read_record(env.config.home_path, str(mnt)) is not None, 60)  # once it serves
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            record = read_record(env.config.home_path, str(mnt))
            assert record is not None and record.pid == proc.pid
            write_record(env.config.home_path, dataclasses.replace(record, pid=stranger.pid))
            out = env.cli("umount", str(mnt)).stdout
            assert "stale" in out and not is_mounted(str(mnt))
            assert stranger.poll() is None  # untouched (it used to get the SIGTERM and be waited for)
            assert not record_path(env.config.home_path, str(mnt)).exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_a_mount_daemon_is_told_from_a_process_that_names_another_path(tmp_path: Path) -> None:
    """The check both ``datahub umount`` and the CSI plugin trust a recorded pid with: the
    process must name the mount point, absolute or relative to its working directory."""
    code = "import sys, time; sys.stdout.write('up'); sys.stdout.flush(); time.sleep(300)"
    (tmp_path / "mnt").mkdir()
    for args in (["mnt"], ["./mnt/"], [str(tmp_path / "mnt")]):
        proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=tmp_path, stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None and proc.stdout.read(2) == b"up"
            assert is_mount_daemon(proc.pid, str(tmp_path / "mnt")), args
            assert not is_mount_daemon(proc.pid, str(tmp_path / "other")), args
            assert not is_mount_daemon(proc.pid, str(tmp_path / "sub" / "mnt")), args
        finally:
            proc.kill()
            proc.wait()
    assert not is_mount_daemon(proc.pid, str(tmp_path / "mnt"))  # gone: dead, whatever it named
    assert not is_mount_daemon(0, str(tmp_path / "mnt"))


def test_mount_refuses_a_busy_mountpoint_and_bad_input(env: FuseEnv, small: Dataset) -> None:
    mnt = env.mountpoint("busy")
    with env.mounted(mnt, "small"):
        busy = env.cli("mount", str(mnt), "small", check=False)
        assert busy.returncode != 0 and "already a mount point" in busy.stderr
    bad = env.cli("mount", str(mnt), "Bad Name", check=False)
    assert bad.returncode == 2 and "invalid dataset name" in bad.stderr
    missing = env.cli("mount", str(mnt), "nosuch", check=False)
    assert missing.returncode == 3
    assert not is_mounted(str(mnt))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()[
            :1
        ]
        != "Z"
    )


def test_a_background_mount_that_fails_says_only_its_own_error(env: FuseEnv, small: Dataset) -> None:
    """The error of a failed ``--background`` start is this start's, from the daemon's log.

    The log is appended to by every start on that mount point: read from its end, a typo
    fixed in the next try (`smal@v1`, then `small@v9`) answered with the first try's
    "dataset 'smal' not found" as well, and a start that wrote nothing with only the old one.
    """
    mnt = env.mountpoint("failing")
    first = env.cli("mount", str(mnt), "smal@v1", "--background", check=False)
    assert first.returncode == 3 and "dataset 'smal' not found" in first.stderr
    second = env.cli("mount", str(mnt), "small@v9", "--background", check=False)
    assert second.returncode == 3, second.stderr
    assert "'small' has no version 9" in second.stderr
    assert "smal'" not in second.stderr, second.stderr
    assert "error: the mount did not start: error:" not in second.stderr  # said once
    assert not is_mounted(str(mnt))


def test_a_mount_that_fails_before_serving_closes_its_cache(env: FuseEnv, small: Dataset) -> None:
    """A start that fails (no such version) closes the disk cache it opened: the next start
    finds it closed and does not rebuild its index as after a crash (newuser14's finding)."""
    mnt = env.mountpoint("closes-cache")
    failed = env.cli("mount", str(mnt), "small@v9", "--background", check=False)
    assert failed.returncode == 3, failed.stderr
    with env.mounted(mnt, "small@v1"):
        pass
    log = (env.root / f"mount-{mnt.name}.log").read_text()
    assert "a previous process did not close it" not in log, log


def test_a_mount_point_that_holds_files_is_refused(env: FuseEnv, small: Dataset) -> None:
    """A mount point is an existing empty directory (README, `mount --help`): mounted over,
    a directory's own files vanish from view until the unmount (a job reading `/mnt/out`
    sees none of the outputs it left there), so it is refused, naming the directory, as
    rclone and s3fs refuse it. (The foreground mount checks the same, in the same place.)"""
    mnt = env.mountpoint("holds-files")
    (mnt / "notes.txt").write_text("mine")
    try:
        refused = env.cli("mount", str(mnt), "small@v1", "--background", check=False)
        assert refused.returncode == 2, refused.stderr
        assert f"mount point {mnt} is not empty" in refused.stderr and "notes.txt" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert not is_mounted(str(mnt)) and (mnt / "notes.txt").read_text() == "mine"
    finally:
        env.teardown(mnt, None)
