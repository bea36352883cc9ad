"""A mount's record, log and stats snapshot are its owner's only (review19b's finding): they
name the datasets, buckets and workspaces a user mounts, mount points, warm-up scopes and
error lines with keys and lease holders, and were written 0644 in directories made 0755, so
every local account could read them. Their directories are 0700 now, and one an earlier
version made 0755 is tightened at the next write."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from datahub.cache.stats import write_snapshot
from fuse_adapter import daemon


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_mount_record_and_its_log_directory_are_owner_only(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "run" / "mounts").mkdir(parents=True, mode=0o755)  # as an earlier version left it
    os.chmod(home / "run" / "mounts", 0o755)
    path = daemon.write_record(
        home, daemon.MountRecord(str(tmp_path / "mnt"), os.getpid(), "readonly", "ds@v1")
    )
    assert _mode(path.parent) == 0o700  # before: 0755, the record 0644 in it
    log = tmp_path / "other-home" / "run" / "mounts" / "x.log"
    proc, ready = daemon.spawn_until_ready(["--no-such-flag"], log, timeout=30)  # exits at once
    proc.wait(timeout=30)
    assert not ready and _mode(log.parent) == 0o700


def test_a_stats_snapshot_directory_is_owner_only(tmp_path: Path) -> None:
    directory = tmp_path / "cache" / "stats"
    directory.mkdir(parents=True)
    os.chmod(directory, 0o755)
    write_snapshot(directory, {"mountpoint": "/mnt/x"})
    assert _mode(directory) == 0o700
